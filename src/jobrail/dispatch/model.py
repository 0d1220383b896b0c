"""The order in which a queue's tenants get their held jobs released: start-time fair
queueing (stride scheduling), pure and deterministic.

Each tenant with held jobs has a virtual time; each release goes to the tenant whose
virtual time is smallest (ties by tenant id) and adds 1/weight to it. The queue's
virtual time is that of the last release. A tenant that becomes active starts at the
later of its own and the queue's virtual time: one that had no jobs for a while banks
nothing (it takes nothing from the others when it comes back), and one that arrives
late competes at once, not after the backlog ahead of it.
"""

import heapq
from collections.abc import Iterable
from typing import Generic, TypeVar

# Who takes turns: a tenant, or a tenant's line (tenant, key) inside its share.
T = TypeVar("T", str, tuple[str, str])


class FairShares(Generic[T]):
    """The active tenants (or lines) of one queue and their virtual times."""

    def __init__(self) -> None:
        self._vtime: dict[T, float] = {}
        self._weight: dict[T, float] = {}
        # (vtime, tenant, generation): an entry of an older generation is stale, skipped.
        self._heap: list[tuple[float, T, int]] = []
        self._generation: dict[T, int] = {}
        self._active: set[T] = set()
        self.virtual_time = 0.0

    @property
    def active(self) -> frozenset[T]:
        return frozenset(self._active)

    def activate(self, tenant: T, weight: float = 1.0) -> None:
        """`tenant` has held jobs: it takes part from now on."""
        if weight <= 0:
            raise ValueError("a weight is positive")
        self._weight[tenant] = weight
        if tenant in self._active:
            return
        self._active.add(tenant)
        self._vtime[tenant] = max(self._vtime.get(tenant, self.virtual_time), self.virtual_time)
        self._push(tenant)

    def activate_all(self, tenants: Iterable[T]) -> None:
        for tenant in tenants:
            self.activate(tenant)

    def deactivate(self, tenant: T) -> None:
        """`tenant` has no held jobs left: it takes no part until it has some again."""
        self._active.discard(tenant)
        if len(self._vtime) > 2 * len(self._active) + 64:
            self._forget_idle()

    def plan(self, count: int) -> list[T]:
        """The tenants of the next `count` releases, in order, if every active tenant
        had jobs enough (nothing changes: `charge` each as it is released)."""
        heap = [(self._vtime[tenant], tenant) for tenant in self._active]
        heapq.heapify(heap)
        picks: list[T] = []
        while heap and len(picks) < count:
            vtime, tenant = heapq.heappop(heap)
            picks.append(tenant)
            heapq.heappush(heap, (vtime + 1 / self._weight[tenant], tenant))
        return picks

    def charge(self, tenant: T) -> None:
        """One of `tenant`'s jobs was released: it must be the head (see `plan`)."""
        while self._heap and not self._current(self._heap[0]):
            heapq.heappop(self._heap)
        if not self._heap or self._heap[0][1] != tenant:
            raise ValueError(f"{tenant!r} is not the next tenant to release")
        vtime, _, _ = heapq.heappop(self._heap)
        self.virtual_time = vtime
        self._vtime[tenant] = vtime + 1 / self._weight[tenant]
        self._push(tenant)

    def _push(self, tenant: T) -> None:
        generation = self._generation.get(tenant, 0) + 1
        self._generation[tenant] = generation
        heapq.heappush(self._heap, (self._vtime[tenant], tenant, generation))

    def _current(self, entry: tuple[float, T, int]) -> bool:
        _, tenant, generation = entry
        return tenant in self._active and self._generation.get(tenant) == generation

    def _forget_idle(self) -> None:
        """Drop the idle tenants at most one release ahead of the queue's virtual time:
        back, they start at it (a lead of one release forgiven, so that memory stays
        bounded by the active tenants however many come and go)."""
        for tenant in [t for t in self._vtime if t not in self._active]:
            if self._vtime[tenant] <= self.virtual_time + 1 / self._weight[tenant]:
                del self._vtime[tenant]
                self._weight.pop(tenant, None)
                self._generation.pop(tenant, None)
        self._heap = [entry for entry in self._heap if self._current(entry)]
        heapq.heapify(self._heap)
