"""The limits backend, Redis, and how a job waits when its limits say no (see
jobrail.limits). Redis also holds the scheduler's leader lock and the API's rate limits."""

from typing import Annotated, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from jobrail.settings.values import PositiveFloat, check_address


class RedisSettings(BaseModel):
    model_config = ConfigDict(hide_input_in_errors=True)  # the URL holds the password

    url: SecretStr = SecretStr("redis://127.0.0.1:6379/0")
    cluster: bool = Field(
        default=False,
        description="The URL is one node of a Redis Cluster (the client finds the others "
        "from it); every job type's limit keys must then share a slot (checked at start-up).",
    )
    key_prefix: str = "jobrail:"
    socket_timeout_s: PositiveFloat = 2.0

    @field_validator("url")
    @classmethod
    def _redis_url(cls, url: SecretStr) -> SecretStr:
        if not url.get_secret_value().startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("use a redis://, rediss:// or unix:// URL")
        check_address(url.get_secret_value())
        return url

    @field_validator("key_prefix")
    @classmethod
    def _no_hash_tag(cls, prefix: str) -> str:
        # The backend puts a hash tag in every key (see jobrail.limits.model.hash_tagged);
        # a brace in the prefix would be the one Redis Cluster reads instead.
        if "{" in prefix or "}" in prefix:
            raise ValueError("must not contain '{' or '}' (jobrail adds the hash tags)")
        return prefix

    @model_validator(mode="after")
    def _cluster_url(self) -> Self:
        if not self.cluster:
            return self
        url = urlsplit(self.url.get_secret_value())
        if url.scheme == "unix":
            raise ValueError("url: a Redis Cluster is reached over TCP, not a unix:// socket")
        if url.path.strip("/") not in ("", "0") or "db=" in url.query:
            raise ValueError("url: a Redis Cluster has only database 0")
        return self


class LimitsSettings(BaseModel):
    """How a job waits when its limits say no (see jobrail.limits)."""

    contention_retry_s: PositiveFloat = Field(
        default=0.25,
        description="When a lock or a concurrency slot is taken, look again after at most this.",
    )
    deferral_jitter: Annotated[float, Field(ge=0, le=1)] = Field(
        default=0.2, description="Deferrals wait up to this fraction longer, at random."
    )
    unavailable_retry_max_s: PositiveFloat = Field(
        default=30.0, description="Cap of the backoff while Redis is unreachable."
    )
