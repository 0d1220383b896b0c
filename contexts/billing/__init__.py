"""Billing: invoices from draft to paid. Paying publishes ``invoice.paid.v1``."""

from contexts.billing.adapters.api import router
from contexts.billing.adapters.ioc import BillingProvider
from contexts.billing.adapters.tasks import pay_invoice
from jobrail.modules import Module

module = Module(name="billing", jobs=[pay_invoice], routers=[router], providers=[BillingProvider()])
