"""Notifications: receipts for paid invoices and month-end run summaries, each sent once,
over SMTP (or the console)."""

from contexts.notifications.adapters.api import router
from contexts.notifications.adapters.ioc import NotificationsProvider
from contexts.notifications.adapters.tasks import send_month_end_summary, send_receipt
from contexts.schema import SCHEMA
from jobrail import Module

module = Module(
    name="notifications",
    jobs=[send_receipt, send_month_end_summary],
    routers=[router],
    providers=[NotificationsProvider()],
    migrations=[SCHEMA],
)
