"""The database: its URL (Postgres through asyncpg, or SQLite for the embedded mode),
its pool, the pooler in front of it, and the Postgres schema of the platform's tables."""

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator

from jobrail.settings.values import MAX_COUNT, PositiveFloat, PositiveInt, check_address


class DatabaseSettings(BaseModel):
    # hide_input_in_errors: a refused URL is not repeated in the error (it holds the
    # password), also for a host app that builds these settings itself.
    model_config = ConfigDict(
        validate_by_name=True, validate_by_alias=True, hide_input_in_errors=True
    )

    url: SecretStr = SecretStr("sqlite+aiosqlite:///./var/jobrail.db")
    pool_size: PositiveInt = 10
    max_overflow: Annotated[int, Field(ge=0, le=MAX_COUNT)] = 10
    pool_timeout_s: PositiveFloat = 10.0
    connect_timeout_s: PositiveFloat = 5.0
    echo: bool = False
    pooler: Literal["none", "session", "transaction"] = Field(
        default="none",
        description="Postgres only: the connection pooler between jobrail and Postgres "
        "(PgBouncer, a managed pooler). `transaction`: each transaction may run on another "
        "server connection, so jobrail keeps no prepared statement past a statement and no "
        "session state (asyncpg's statement caches off); `session` and `none` keep them.",
    )

    # `schema` itself would shadow BaseModel.schema(): the setting keeps that name as its alias.
    schema_: str | None = Field(
        default=None,
        alias="schema",
        description="Postgres only: the schema of the platform's tables and of "
        "jobrail_alembic_version (created by `jobrail migrate`), so that they cannot clash "
        "with a host's own tables. Unset: the database's default schema.",
    )

    @field_validator("url")
    @classmethod
    def _supported_driver(cls, url: SecretStr) -> SecretStr:
        scheme = url.get_secret_value().split("://", 1)[0]
        if scheme not in {"postgresql+asyncpg", "sqlite+aiosqlite"}:
            raise ValueError(
                "use a postgresql+asyncpg:// or sqlite+aiosqlite:// URL "
                f"(got a {scheme or 'malformed'}:// URL)"
            )
        check_address(url.get_secret_value(), database=True)
        return url

    @field_validator("pooler")
    @classmethod
    def _pooler_on_postgres(cls, pooler: str, info: ValidationInfo) -> str:
        url = info.data.get("url")
        if pooler != "none" and url is not None and url.get_secret_value().startswith("sqlite"):
            raise ValueError("SQLite has no pooler: unset it, or use a postgresql+asyncpg:// URL")
        return pooler

    @field_validator("schema_")
    @classmethod
    def _plain_schema_name(cls, schema: str | None, info: ValidationInfo) -> str | None:
        if schema is None:
            return None
        if info.data.get("pooler") == "transaction":
            # The schema is put first on each connection's search_path: session state,
            # which a transaction-mode pooler does not keep (see store.platform_schema).
            raise ValueError(
                "a platform schema needs each connection's search_path, which a pooler in "
                "transaction mode does not keep: unset JOBRAIL_DATABASE__SCHEMA, or run the "
                "pooler in session mode (JOBRAIL_DATABASE__POOLER=session)"
            )
        url = info.data.get("url")
        if url is not None and url.get_secret_value().startswith("sqlite"):
            raise ValueError("SQLite has no schemas: unset it, or use a postgresql+asyncpg:// URL")
        # A name that reads the same quoted or not, so that SQL and psql agree on it.
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,62}", schema):
            raise ValueError(
                "use a plain SQL name: lower-case letters, digits and underscores, not "
                f"starting with a digit, at most 63 characters (got {schema!r})"
            )
        if schema.startswith("pg_"):
            raise ValueError("names starting with pg_ are Postgres's own schemas")
        return schema

    @property
    def is_sqlite(self) -> bool:
        return self.url.get_secret_value().startswith("sqlite")

    @property
    def transaction_pooled(self) -> bool:
        """Each transaction may run on another server connection (see `pooler`)."""
        return self.pooler == "transaction"
