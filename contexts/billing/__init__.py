"""Billing: invoices from draft to paid. Paying publishes ``invoice.paid.v1``.

Invoices created with ``auto_pay`` are paid by the scheduled ``billing-auto-pay``
(every 10 minutes): it enqueues ``billing.pay_invoice`` once for each one that is issued.
"""

from contexts.billing.adapters.api import router
from contexts.billing.adapters.ioc import BillingProvider
from contexts.billing.adapters.tasks import auto_pay, pay_invoice
from contexts.schema import SCHEMA
from jobrail import Module, Schedule

module = Module(
    name="billing",
    jobs=[pay_invoice, auto_pay],
    routers=[router],
    providers=[BillingProvider()],
    schedules=[Schedule("billing-auto-pay", cron="*/10 * * * *", job_type=auto_pay.name)],
    migrations=[SCHEMA],
)
