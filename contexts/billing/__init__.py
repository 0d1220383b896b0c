"""Billing: invoices from draft to paid. Paying publishes ``invoice.paid.v1``.

Invoices created with ``auto_pay`` are paid by the scheduled ``billing-auto-pay``
(every 10 minutes): it enqueues ``billing.pay_invoice`` once for each one that is issued.

The month-end run (``POST /billing/month-end-runs``) issues a month's drafts as one
batch of ``billing.issue_invoice`` jobs; its ``finally`` callback,
``billing.finish_month_end``, publishes ``month_end_run.finished.v1`` with the figures.
"""

from contexts.billing.adapters.api import router
from contexts.billing.adapters.ioc import BillingProvider
from contexts.billing.adapters.month_end_api import router as month_end_router
from contexts.billing.adapters.tasks import auto_pay, finish_month_end, issue_invoice, pay_invoice
from contexts.schema import SCHEMA
from jobrail import Module, Schedule

module = Module(
    name="billing",
    jobs=[pay_invoice, auto_pay, issue_invoice, finish_month_end],
    routers=[router, month_end_router],
    providers=[BillingProvider()],
    schedules=[Schedule("billing-auto-pay", cron="*/10 * * * *", job_type=auto_pay.name)],
    migrations=[SCHEMA],
)
