"""One scheduler fires at a time: the holder of a renewable lock in the limits backend.

Every scheduler process asks for the lock ``scheduler:leader`` (Redis in the stack,
with a random holder token and a fencing counter: see jobrail.limits); the one that
gets it leads and the others ask again every tick. The leader renews the lock every
quarter of its TTL.

Failure bounds (TTL = ``leader_ttl_s``, tick = ``tick_s``):

- The leader dies (kill -9, host lost): its lock ends at most TTL after its last
  renewal, and a standby takes it at its next tick: no one leads for at most
  TTL + tick. The new leader then fires the periods missed meanwhile (see scheduler).
- The leader stops (SIGTERM): it releases the lock; a standby leads within a tick.
- The leader cannot renew (Redis down, a partition, a stalled event loop): it stops
  firing at once when Redis says it is unavailable, and in any case once a quarter of
  the TTL is left since the last renewal it sent, measured on its own monotonic
  clock, so it has stopped before anyone else can take the lock. A fire already in
  flight then may overlap the next leader's; the period's idempotency key makes that
  a no-op.
- Redis is down: nobody leads and nothing fires; when it is back, the holder whose
  lock is still live renews it, or someone takes a free one.
"""

import logging
import time
from collections.abc import Callable
from datetime import timedelta

from jobrail.limits.model import Acquire, Grant, LimitsBackend, LimitsUnavailableError, Lock

log = logging.getLogger("jobrail.scheduler")

LEADER_KEY = "scheduler:leader"


class Leadership:
    def __init__(
        self,
        backend: LimitsBackend,
        holder: str,
        ttl: timedelta,
        *,
        key: str = LEADER_KEY,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._backend = backend
        self._holder = holder
        self._ttl_s = ttl.total_seconds()
        self._lock = Acquire(Lock(key=key, ttl_s=self._ttl_s, name="scheduler-leader"), key)
        self._monotonic = monotonic
        self._grant: Grant | None = None
        self._sent = 0.0  # when the last successful acquire or renewal was sent
        self._valid_until = 0.0

    @property
    def holder(self) -> str:
        return self._holder

    @property
    def fence(self) -> int | None:
        """The lock's fencing token: it grows with every new leader (a "term")."""
        return self._grant.fence if self._grant else None

    @property
    def renew_every_s(self) -> float:
        return self._ttl_s / 4

    @property
    def is_leader(self) -> bool:
        """Whether this process may fire now."""
        return self._grant is not None and self._monotonic() < self._valid_until

    def next_check_in(self) -> float:
        """Seconds until `hold` has something to do (a renewal) while leading."""
        if self._grant is None:
            return 0.0
        return max(0.0, self._sent + self.renew_every_s - self._monotonic())

    async def hold(self) -> bool:
        """Take the lead if it is free, renew it when due; return whether this leads."""
        if self._grant is not None and self.next_check_in() > 0 and self.is_leader:
            return True
        sent = self._monotonic()
        try:
            if self._grant is not None:
                await self._renew(sent)
            if self._grant is None:
                await self._acquire(sent)
        except LimitsUnavailableError as exc:
            if self._valid_until:
                log.warning(
                    "scheduler: cannot reach the lock (%s); not firing until it answers",
                    exc,
                    extra={"holder": self._holder},
                )
            # Keep the grant: the lock may still be ours when Redis answers again.
            self._valid_until = 0.0
        return self.is_leader

    async def _acquire(self, sent: float) -> None:
        admission = await self._backend.admit([self._lock], self._holder)
        if admission.grant is None:
            return
        self._grant = admission.grant
        self._confirmed(sent)
        log.info(
            "scheduler: leading (fence %s)",
            self._grant.fence,
            extra={"event": "leader.acquired", "holder": self._holder, "fence": self.fence},
        )

    async def _renew(self, sent: float) -> None:
        assert self._grant is not None
        if await self._backend.extend(self._grant):
            self._confirmed(sent)
            return
        log.warning(
            "scheduler: lost the lead (fence %s)",
            self._grant.fence,
            extra={"event": "leader.lost", "holder": self._holder, "fence": self.fence},
        )
        self._grant = None
        self._valid_until = 0.0

    def _confirmed(self, sent: float) -> None:
        # The lock lives TTL from when Redis ran the call, which is after `sent`:
        # stopping a quarter TTL before sent + TTL leaves a margin for clock rates.
        self._sent = sent
        self._valid_until = sent + self._ttl_s * 0.75

    async def resign(self) -> None:
        """Release the lock (on shutdown) so that a standby leads at its next tick."""
        grant, self._grant, self._valid_until = self._grant, None, 0.0
        if grant is None:
            return
        try:
            await self._backend.release(grant)
        except LimitsUnavailableError:
            return  # the lock ends by itself after its TTL
        log.info(
            "scheduler: resigned",
            extra={"event": "leader.resigned", "holder": self._holder, "fence": grant.fence},
        )
