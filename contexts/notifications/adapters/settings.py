from typing import Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class NotificationsSettings(BaseSettings):
    """``JOBRAIL_NOTIFICATIONS__*``. The console sender prints e-mails (embedded mode)."""

    model_config = SettingsConfigDict(
        env_prefix="JOBRAIL_NOTIFICATIONS__", env_file=".env", extra="ignore"
    )

    email_backend: Literal["console", "smtp"] = "console"
    smtp_host: str = "127.0.0.1"
    smtp_port: int = Field(default=25, ge=1, le=65535)
    smtp_username: str | None = None
    smtp_password: SecretStr | None = None
    smtp_starttls: bool = False
    smtp_timeout_s: float = Field(default=10.0, gt=0)
    sender: str = "receipts@jobrail.invalid"
    provider_rate_per_s: float = Field(default=10.0, gt=0)
    provider_burst: float = Field(default=20.0, gt=0)
