from dishka import AnyOf, Provider, Scope, provide

from contexts.notifications.adapters.email import ConsoleEmailSender, SmtpEmailSender
from contexts.notifications.adapters.persistence import SqlaNotificationsUnitOfWork
from contexts.notifications.adapters.settings import NotificationsSettings
from contexts.notifications.application.ports import EmailSender, NotificationsUnitOfWork
from contexts.notifications.application.use_cases import (
    ListNotifications,
    SendMonthEndSummary,
    SendReceipt,
)
from jobrail.sql import UnitOfWorkFactory


class NotificationsProvider(Provider):
    scope = Scope.REQUEST

    @provide(scope=Scope.APP)
    def settings(self) -> NotificationsSettings:
        return NotificationsSettings()

    @provide(scope=Scope.APP)
    def email_sender(self, settings: NotificationsSettings) -> EmailSender:
        if settings.email_backend == "smtp":
            return SmtpEmailSender(settings)
        return ConsoleEmailSender()

    @provide
    def unit_of_work(
        self, factory: UnitOfWorkFactory
    ) -> AnyOf[SqlaNotificationsUnitOfWork, NotificationsUnitOfWork]:
        return factory(SqlaNotificationsUnitOfWork)

    send_receipt = provide(SendReceipt)
    send_month_end_summary = provide(SendMonthEndSummary)
    list_notifications = provide(ListNotifications)
