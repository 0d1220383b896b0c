from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class SyncSettings(BaseSettings):
    """``JOBRAIL_SYNC__*``. By default the vendor is the sandbox the API serves itself in the
    embedded mode; the stack mode needs ``VENDOR_BASE_URL`` set to the real vendor (or, for
    development, ``SANDBOX=true``)."""

    model_config = SettingsConfigDict(env_prefix="JOBRAIL_SYNC__", env_file=".env", extra="ignore")

    vendor_base_url: str | None = Field(
        default=None,
        description="The vendor API. Unset: the sandbox this app serves itself, at the "
        "API's own host and port (JOBRAIL_API__HOST, JOBRAIL_API__PORT).",
    )
    connect_timeout_s: float = Field(default=2.0, gt=0)
    read_timeout_s: float = Field(default=10.0, gt=0)
    vendor_rate_per_s: float = Field(default=10.0, gt=0)
    vendor_burst: float = Field(default=10.0, gt=0)
    lock_ttl_s: float = Field(default=30.0, gt=0)
    throttle_max_wait_s: float = Field(default=5.0, gt=0)
    page_jobs_from: int = Field(
        default=20,
        ge=2,
        description="An account with at least this many pages (as the vendor says on the "
        "first) syncs as a chain of page jobs, one per page, each reporting its progress.",
    )
    sandbox: bool | None = Field(
        default=None,
        description="Serve the sandbox vendor from the API at /sandbox/vendor. Unset: in the "
        "embedded mode only; true: in the stack mode too, for development (production "
        "refuses it); false: never.",
    )
    sandbox_rate_per_s: int = Field(default=20, ge=1)
    sandbox_page_size: int = Field(default=10, ge=1, le=1000)
    sandbox_page_delay_ms: int = Field(default=0, ge=0)
    sandbox_max_calls: int = Field(
        default=1000, ge=1, le=100_000, description="Calls the sandbox's /_calls remembers."
    )
    sandbox_max_accounts: int = Field(
        default=1000, ge=1, le=100_000, description="Accounts whose call counts it remembers."
    )

    def vendor_url(self, api_host: str, api_port: int) -> str:
        """The vendor's base URL: `vendor_base_url`, or else the sandbox at the API's own
        address (a wildcard bind address is reached at the loopback one)."""
        if self.vendor_base_url:
            return self.vendor_base_url
        host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(api_host, api_host)  # noqa: S104
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{api_port}/sandbox/vendor"
