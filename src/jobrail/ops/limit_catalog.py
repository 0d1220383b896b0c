"""What the console shows of limits: every limit the loaded job types declare, and who
holds one of them for a key (the job behind each holder, when a job's admission took it)."""

import dataclasses
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from jobrail.jobs.registry import JobRegistry
from jobrail.limits.model import Concurrency, Limit, Lock, SlidingWindow, TokenBucket

KIND_NAMES: dict[type[Any], str] = {
    TokenBucket: "token bucket",
    SlidingWindow: "sliding window",
    Concurrency: "concurrency slots",
    Lock: "lock",
}


def kind_name(code: str) -> str:
    """A kind's name for people, from its short code (``lk``: lock)."""
    return next((name for kind, name in KIND_NAMES.items() if kind.kind == code), code)


@dataclass(frozen=True, slots=True)
class DeclaredLimit:
    job_type: str
    name: str
    kind: str
    key: str
    """Its key template (``account:{tenant_id}:{account_id}``)."""
    terms: str
    """Its parameters, as declared (``capacity=10, per_second=5``)."""


def _terms(limit: Limit) -> str:
    return ", ".join(
        f"{f.name}={getattr(limit, f.name):g}"
        for f in dataclasses.fields(limit)
        if f.name not in ("name", "key")
    )


def declared_limits(registry: JobRegistry) -> list[DeclaredLimit]:
    """Every job type's limits and lock, by job type then in declaration order."""
    return [
        DeclaredLimit(
            spec.name,
            limit.name,
            KIND_NAMES.get(type(limit), limit.kind),
            limit.key,
            _terms(limit),
        )
        for spec in sorted(registry, key=lambda s: s.name)
        for limit in spec.limits.all()
    ]


@dataclass(frozen=True, slots=True)
class Holder:
    holder: str
    until: datetime
    job_id: str | None
    """The job whose admission holds it (holders ``<job id>/...``), else None."""

    @classmethod
    def of(cls, held: dict[str, Any]) -> "Holder":
        holder = str(held["holder"])
        head = holder.split("/", 1)[0]
        try:
            job_id: str | None = str(uuid.UUID(head)) if "/" in holder else None
        except ValueError:
            job_id = None
        return cls(holder, datetime.fromtimestamp(float(held["until_ms"]) / 1000, UTC), job_id)
