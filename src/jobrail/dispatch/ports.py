"""What a dispatcher's pass needs, as ports: the store of held jobs (with the queue's
lease), the queue's ready count, and the publisher of released jobs' messages."""

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime, timedelta
from typing import Protocol

from jobrail.jobs.domain import Job
from jobrail.jobs.messages import JobMessage
from jobrail.kernel.ids import JobId

# A tenant's line in a queue: (tenant id, fair key). A job type without a fair key puts
# all of a tenant's jobs in one line, ''; one with a key splits its share between lines.
Line = tuple[str, str]


class ReleaseTurn(Protocol):
    """One pass over a queue, in one transaction that holds the queue's lease: what it
    releases is released when the transaction commits, and not at all if it does not."""

    @property
    def term(self) -> int:
        """Grows each time another dispatcher takes the queue."""
        ...

    async def arrivals(self) -> list[Line]:
        """The lines whose held jobs arrived since the last pass took them (taken)."""
        ...

    async def lines(self) -> list[Line]:
        """Every line with held jobs in the queue, due by the pass's time."""
        ...

    async def came_due(self, since: datetime) -> list[Line]:
        """The lines with held jobs that came due after `since`, by the pass's time."""
        ...

    async def weights(self) -> dict[str, float]:
        """The tenants whose weight is set, and their weights (the others' is 1)."""
        ...

    async def heads(self, wants: Mapping[Line, int]) -> dict[Line, list[JobId]]:
        """Up to `wants[line]` of each line's held jobs due by the pass's time, in its
        order."""
        ...

    async def release(self, ids: Sequence[JobId], now: datetime) -> list[Job]:
        """Release the jobs of `ids` that are still held, waiting and before their
        deadline at `now`; the jobs released."""
        ...

    @property
    def paused(self) -> bool:
        """Whether an operator paused anything (a queue, a type or a tenant) anywhere."""
        ...

    async def figures(self, drain_per_s: float, active_weight: float) -> None:
        """Write the queue's recent drain (jobs per second) and the sum of its active
        tenants' weights, which a waiting job's estimate reads."""
        ...


# What moved in the queues since the dispatcher last looked, read at once: the queues
# with arrivals noted, each queue's fast-path credit and spent mark as stored, and which
# of the queues asked about have held jobs that came due in (since, now].
Stirs = tuple[frozenset[str], Mapping[str, tuple[int, bool]], frozenset[str]]


class DispatchStore(Protocol):
    def turn(
        self, queue: str, holder: str, now: datetime, lease: timedelta
    ) -> AbstractAsyncContextManager[ReleaseTurn | None]:
        """A pass over `queue` as `holder`, who holds its lease until `now + lease`; None
        (and nothing done) while another holder's lease runs. Leaving it with an error
        undoes the pass."""
        ...

    async def gate(self, queue: str, credit: int) -> bool:
        """Let the next `credit` enqueues of jobs due now in `queue` publish them at once
        (the fast path), holding none; 0: every one holds its job for a pass. Whether the
        credit changed (enqueues took some since it was last set, or it opened or
        closed)."""
        ...

    async def stirs(self, queues: Sequence[str], since: datetime, now: datetime) -> Stirs:
        """What moved in the queues (see Stirs), in one read outside any pass."""
        ...


class ReadyGauge(Protocol):
    async def ready(self, queue: str) -> int:
        """Messages of `queue` published and not yet taken by a worker."""
        ...


class Sender(Protocol):
    async def send(self, messages: Sequence[JobMessage]) -> Sequence[BaseException | None]:
        """Publish `messages` (confirmed): None for each one sent, else its error."""
        ...
