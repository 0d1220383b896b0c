from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class SyncSettings(BaseSettings):
    """``JOBRAIL_SYNC__*``. By default the vendor is the sandbox the API serves itself."""

    model_config = SettingsConfigDict(env_prefix="JOBRAIL_SYNC__", env_file=".env", extra="ignore")

    vendor_base_url: str = "http://127.0.0.1:8000/sandbox/vendor"
    connect_timeout_s: float = Field(default=2.0, gt=0)
    read_timeout_s: float = Field(default=10.0, gt=0)
    vendor_rate_per_s: float = Field(default=10.0, gt=0)
    vendor_burst: float = Field(default=10.0, gt=0)
    lock_ttl_s: float = Field(default=30.0, gt=0)
    throttle_max_wait_s: float = Field(default=5.0, gt=0)
    sandbox: bool = Field(default=True, description="Serve the sandbox vendor from the API.")
    sandbox_rate_per_s: int = Field(default=20, ge=1)
    sandbox_page_size: int = Field(default=10, ge=1)
    sandbox_page_delay_ms: int = Field(default=0, ge=0)
