"""E-mail senders: SMTP (aiosmtplib) and the console (embedded mode)."""

import logging
from email.message import EmailMessage as MimeMessage

import aiosmtplib

from contexts.notifications.adapters.settings import NotificationsSettings
from contexts.notifications.application.ports import EmailMessage
from jobrail.kernel.errors import PermanentError, TransientError

log = logging.getLogger("contexts.notifications")


def _mime(message: EmailMessage, sender: str) -> MimeMessage:
    mime = MimeMessage()
    mime["From"] = sender
    mime["To"] = message.recipient
    mime["Subject"] = message.subject
    mime["Message-ID"] = f"<{message.message_id}@jobrail>"
    mime.set_content(message.body)
    return mime


class SmtpEmailSender:
    def __init__(self, settings: NotificationsSettings) -> None:
        self._settings = settings

    async def send(self, message: EmailMessage) -> None:
        settings = self._settings
        try:
            await aiosmtplib.send(
                _mime(message, settings.sender),
                hostname=settings.smtp_host,
                port=settings.smtp_port,
                username=settings.smtp_username,
                password=settings.smtp_password.get_secret_value()
                if settings.smtp_password
                else None,
                start_tls=settings.smtp_starttls,
                timeout=settings.smtp_timeout_s,
            )
        except aiosmtplib.SMTPResponseException as exc:
            reason = f"SMTP {exc.code}: {exc.message}"
            if 400 <= exc.code < 500:
                raise TransientError(reason) from exc
            raise PermanentError(reason) from exc
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
            raise TransientError(f"SMTP unavailable: {exc}") from exc


class ConsoleEmailSender:
    async def send(self, message: EmailMessage) -> None:
        log.info("e-mail to %s: %s\n%s", message.recipient, message.subject, message.body)
