"""Pause and resume a queue, a job type or a tenant.

While paused, none of its jobs starts: the claim refuses them (``store.queries.claimable``),
the dispatcher releases none of them, and the jobs released before the pause are held
again, so their messages are dropped rather than kept going round. Running jobs finish;
a job whose worker dies while paused is not taken over until the resume. Nothing is
lost: a deadline that passes meanwhile ends its job ``expired``, as it would otherwise.
Resuming notes the scope's tenants for the dispatchers, which release the backlog in
fair order at their next pass. Pauses hold back what the dispatcher holds whether fair
dispatch is on or off (off, the dispatchers still release the held jobs, every
``JOBRAIL_DISPATCH__REDISCOVER_S``).
"""

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from jobrail.jobs.intake import JobCatalog
from jobrail.jobs.ports import PAUSE_SCOPES, Pause
from jobrail.kernel.clock import Clock
from jobrail.kernel.errors import InvalidInputError, NotFoundError


class PauseStore(Protocol):
    async def pause(self, scope: str, value: str, now: datetime) -> tuple[Pause, int]: ...

    async def resume(self, scope: str, value: str) -> bool: ...

    async def pauses(self) -> list[Pause]: ...


@dataclass(frozen=True, slots=True)
class Paused:
    pause: Pause
    recalled: int
    """How many of its jobs had been released and were held again."""


class Pauses:
    """Pause, resume and list (the admin API's and the CLI's). A queue must be one of the
    broker's, a job type one the application declared, a tenant a tenant's name: a typo
    is refused rather than pausing nothing."""

    def __init__(
        self, store: PauseStore, clock: Clock, queues: Collection[str], catalog: JobCatalog
    ) -> None:
        self._store = store
        self._clock = clock
        self._queues = queues
        self._catalog = catalog

    async def pause(self, scope: str, value: str) -> Paused:
        self._check(scope, value)
        pause, recalled = await self._store.pause(scope, value, self._clock.now())
        return Paused(pause, recalled)

    async def resume(self, scope: str, value: str) -> None:
        self._check(scope, value)
        if not await self._store.resume(scope, value):
            raise NotFoundError(f"{scope} {value!r} is not paused")

    async def list(self) -> list[Pause]:
        return await self._store.pauses()

    def _check(self, scope: str, value: str) -> None:
        if scope not in PAUSE_SCOPES:
            raise InvalidInputError(
                f"what to pause is a {', a '.join(PAUSE_SCOPES)}, not {scope!r}",
                details=[{"loc": ["scope"], "msg": "queue, type or tenant", "type": "enum"}],
            )
        if scope == "queue" and value not in self._queues:
            raise InvalidInputError(
                f"no queue {value!r}: the queues are {', '.join(self._queues)}",
                details=[{"loc": ["value"], "msg": "no such queue", "type": "unknown"}],
            )
        if scope == "type" and self._catalog.get(value) is None:
            raise InvalidInputError(
                f"no job type {value!r}",
                details=[{"loc": ["value"], "msg": "no such job type", "type": "unknown"}],
            )
        if scope == "tenant" and not (0 < len(value) <= 64 and value.isprintable()):
            # A host's tenants are any string of its tenant_id column (64 characters).
            raise InvalidInputError(
                "a tenant is 1 to 64 printable characters",
                details=[{"loc": ["value"], "msg": "not a tenant id", "type": "value_error"}],
            )
