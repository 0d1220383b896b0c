"""The event catalog: every integration event, who produces it, who consumes it.

Consumers are job types; publishing an event records one job per consumer.
An event that is not listed here cannot be published.
"""

from contexts.shared.events import InvoicePaidV1, MonthEndRunFinishedV1
from jobrail import EventSpec, Module

EVENTS = [
    EventSpec(
        type=InvoicePaidV1,
        producer="billing",
        consumers=["notifications.send_receipt"],
        description="An issued invoice was paid (once per invoice).",
    ),
    EventSpec(
        type=MonthEndRunFinishedV1,
        producer="billing",
        consumers=["notifications.send_month_end_summary"],
        description="A tenant's month-end run finished, with how many invoices it issued "
        "(once per tenant and month).",
    ),
]

module = Module(name="catalog", events=EVENTS)
