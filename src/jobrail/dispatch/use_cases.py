"""The dispatcher: the loop that releases a queue's held jobs into the broker, in fair
order between tenants (``model.FairShares``), only as many as keep the queue's ready
messages at `ready_target` (the credit: workers take messages as they have room, so
what is released beyond what they can take waits in the broker, where a tenant that
comes later cannot pass it).

Every process that runs jobs runs one; a queue's lease (``DispatchStore.turn``) lets
one of them release its jobs at a time, and another takes over `lease_s` after that one
stops. A pass releases and publishes in one transaction, so that a job is released if
and only if its message was confirmed: a dispatcher that dies mid-pass leaves its jobs
held (its transaction rolls back), and the messages it had published find their jobs
held and are dropped (``worker.outcomes.unclaimed``). Where the broker is the process's
own memory (the embedded mode), the messages are sent after the commit instead: they
would die with it, and the restart sends every released job again.

While a queue has no held backlog, its dispatcher gives the queue's enqueues a credit
of the room left in the broker (``DispatchStore.gate``): that many publish their jobs
at once, as with dispatch off, and wait for no pass; the next ones hold their jobs. A
pass that finds a backlog or a pause sets it to none.
"""

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from jobrail.dispatch.model import FairShares
from jobrail.dispatch.ports import DispatchStore, Line, ReadyGauge, ReleaseTurn, Sender
from jobrail.jobs.enqueue import message_for
from jobrail.jobs.intake import JobCatalog
from jobrail.jobs.messages import JobMessage
from jobrail.kernel.clock import Clock, sleep_unless
from jobrail.kernel.errors import BrokerUnavailableError, StoreUnavailableError
from jobrail.kernel.ids import JobId
from jobrail.settings import DispatchSettings

log = logging.getLogger("jobrail.dispatch")

# The held jobs a tenant's line reads at a time (one statement serves several releases).
HEADS = 4
# How often the tenants' weights are read again (a change applies within this).
WEIGH_EVERY_S = 1.0
# How often a dispatcher looks for jobs held for later that have come due (their lateness).
DUE_EVERY_S = 0.1
# How often the quiet queues are looked at for what would give them work (see
# run_forever): how late a quiet queue may see its first held job, or one come due.
STIRS_EVERY_S = 0.1
# How often the queue's figures for waiting jobs' estimates are written, at most.
FIGURES_EVERY_S = 1.0


@dataclass
class _Queue:
    """What the dispatcher knows of one queue while it holds its lease."""

    queue: str
    term: int | None = None  # the lease's, while this process holds it
    # The lines with held jobs take turns: each tenant's weight is split equally between
    # its lines (its keys), so that the tenant's share is its weight whatever its keys.
    shares: FairShares[Line] = field(default_factory=FairShares)
    keys: dict[str, set[str]] = field(default_factory=dict)  # the active lines, by tenant
    heads: dict[Line, deque[JobId]] = field(default_factory=dict)
    # The lines whose last read of heads found fewer than it asked for: their heads are
    # all they have, until an arrival, a job come due or a rediscovery activates them.
    # A pass over many short lines (1,000 tenants of a few jobs each) read each line once
    # more to find it empty, a statement for each line that ran dry.
    dry: set[Line] = field(default_factory=set)
    discovered_at: float = float("-inf")
    due_since: datetime | None = None  # jobs held for later that came due by then are known
    due_looked_at: float = float("-inf")
    weighed_at: float = float("-inf")
    weights: dict[str, float] = field(default_factory=dict)
    look_again_at: float = float("-inf")  # when a process without the lease looks again
    # The queue's drain while it has a backlog: jobs released since `drained_since`.
    drained: int = 0
    drained_since: float | None = None
    drain_per_s: float | None = None
    credit: int | None = None  # the fast-path credit this process last set, if it did
    # A queue with nothing to do is passed over less often (see JobDispatcher.run_forever).
    quiet: bool = False  # its last pass found nothing to do
    quiet_passes: int = 0
    next_pass_at: float = float("-inf")

    def restart(self, term: int | None) -> None:
        self.term = term
        self.shares = FairShares()
        self.keys.clear()
        self.heads.clear()
        self.dry.clear()
        self.discovered_at = float("-inf")
        self.due_since = None
        self.weighed_at = float("-inf")
        self.drained_since = None
        # Another holder may have set the gate meanwhile: the next pass writes its own.
        self.credit = None

    def activate(self, line: Line) -> None:
        tenant, key = line
        self.dry.discard(line)
        self.keys.setdefault(tenant, set()).add(key)
        self.weigh(tenant)

    def deactivate(self, line: Line) -> None:
        tenant, key = line
        self.shares.deactivate(line)
        self.heads.pop(line, None)
        self.dry.discard(line)
        keys = self.keys.get(tenant, set())
        keys.discard(key)
        if keys:
            self.weigh(tenant)
        else:
            self.keys.pop(tenant, None)

    def weigh(self, tenant: str) -> None:
        """Give each active line of `tenant` its part of the tenant's weight."""
        keys = self.keys[tenant]
        weight = self.weights.get(tenant, 1.0) / len(keys)
        for key in keys:
            self.shares.activate((tenant, key), weight)


class JobDispatcher:
    def __init__(
        self,
        store: DispatchStore,
        gauge: ReadyGauge,
        sender: Sender,
        catalog: JobCatalog,
        clock: Clock,
        settings: DispatchSettings,
        queues: Sequence[str],
        holder: str,
        *,
        send_after_commit: bool = False,
    ) -> None:
        self._store = store
        self._gauge = gauge
        self._sender = sender
        self._catalog = catalog
        self._clock = clock
        self._settings = settings
        self._queues = [_Queue(queue) for queue in queues]
        self._holder = holder
        self._send_after_commit = send_after_commit
        self._lease = timedelta(seconds=settings.lease_s)
        # The fewest jobs a pass releases while the queue has a line: a quarter of the
        # credit (a pass costs a few statements and a publish whatever it releases).
        self._least = max(1, min(16, settings.ready_target // 4))
        self._last_warning = float("-inf")
        self._stirs_looked_at = float("-inf")
        # A quiet queue's passes renew its lease: at least three of them within one.
        self._quiet_s = min(settings.quiet_interval_s, settings.lease_s / 3)

    async def run_forever(self, stop: asyncio.Event | None = None) -> None:
        """Pass over every queue until `stop` is set. With dispatch off, nothing new is
        held, but jobs held before are still released (a pass every `rediscover_s`).

        A queue whose pass found nothing to do (nothing held, released or arrived, no
        fast-path credit taken) is quiet: instead of a pass every `interval_s` (five
        statements and a broker call; for the four default queues, a third of a core
        while idle), one read for all the quiet queues (``DispatchStore.stirs``), every
        STIRS_EVERY_S, asks whether anything moved, and passes over the stirred ones at
        once. A quiet queue is passed over anyway at doubling intervals up to
        `quiet_interval_s`, which renews its lease and tops up its credit."""
        stop = stop or asyncio.Event()
        idle = self._settings.interval_s if self._settings.enabled else self._settings.rediscover_s
        while not stop.is_set():
            if self._settings.enabled and time.monotonic() >= self._stirs_looked_at + STIRS_EVERY_S:
                await self._wake_stirred()
            released = 0
            for q in self._queues:
                if time.monotonic() >= q.next_pass_at:
                    released += await self._pass_safely(q)
                    self._pace(q)
            if not released:
                await sleep_unless(stop, self._rest(idle))

    def _rest(self, idle: float) -> float:
        """How long to wait for the next pass: `idle`, or while every queue is quiet,
        until the next look for what moved (or the next pass, if sooner)."""
        if not self._settings.enabled:
            return idle
        due = min(q.next_pass_at for q in self._queues)
        return max(idle, min(due, self._stirs_looked_at + STIRS_EVERY_S) - time.monotonic())

    async def _wake_stirred(self) -> None:
        """Make the quiet queues in which something moved due for a pass now."""
        now = self._stirs_looked_at = time.monotonic()
        quiet = [q for q in self._queues if now < q.next_pass_at]
        if not quiet:
            return
        at = self._clock.now()
        since = min((q.due_since for q in quiet if q.due_since is not None), default=at)
        try:
            arrived, gates, came_due = await self._store.stirs([q.queue for q in quiet], since, at)
        except StoreUnavailableError:
            return  # the next pass says so
        except Exception:  # the loop goes on: the quiet queues' passes come all the same
            log.exception("dispatcher: looking for what moved in the quiet queues failed")
            return
        for q in quiet:
            credit, spent = gates.get(q.queue, (0, False))
            if q.queue in arrived or q.queue in came_due or spent or credit != (q.credit or 0):
                q.next_pass_at = float("-inf")

    def _pace(self, q: _Queue) -> None:
        """When the next pass over `q` is due: at once after a pass with work; after a
        quiet one, twice as long as after the one before, up to `quiet_interval_s`
        (unless something moves meanwhile, see run_forever)."""
        if not q.quiet:
            q.quiet_passes, q.next_pass_at = 0, float("-inf")
            return
        q.quiet_passes += 1
        wait = self._settings.interval_s * 2.0 ** min(q.quiet_passes, 16)
        q.next_pass_at = time.monotonic() + min(wait, self._quiet_s)

    async def _pass_safely(self, q: _Queue) -> int:
        try:
            return await self.pass_once(q.queue)
        except (StoreUnavailableError, BrokerUnavailableError) as exc:
            q.restart(None)  # what it knew may be stale by the time it is back
            if time.monotonic() - self._last_warning > 10:
                self._last_warning = time.monotonic()
                log.warning("dispatcher: %s; held jobs wait until it is back", exc)
            return 0
        except Exception:
            q.restart(None)
            log.exception("dispatcher: a pass over %s failed; trying again", q.queue)
            return 0

    async def pass_once(self, queue: str) -> int:
        """One pass over `queue`: how many jobs it released."""
        q = next(q for q in self._queues if q.queue == queue)
        q.quiet = False  # until this pass has looked
        if q.term is None and time.monotonic() < q.look_again_at:
            return 0  # another process holds the lease: look now and then only
        sent: list[JobMessage] = []
        credit = 0
        at = self._clock.now()
        async with self._store.turn(queue, self._holder, at, self._lease) as turn:
            if turn is None:
                if q.term is not None:
                    log.info("dispatcher: another process now releases %s", queue)
                q.restart(None)
                q.look_again_at = time.monotonic() + self._settings.lease_s / 3
                return 0
            if turn.term != q.term:
                q.restart(turn.term)
            arrived = await self._learn(q, turn, at)
            if q.shares.active:
                sent = await self._release(q, turn)
            else:
                q.drained_since = None  # a drain is measured over a backlog only
                credit = await self._credit(turn, queue)
            if not self._send_after_commit:
                await self._send(sent)  # an error here undoes the release
        if self._send_after_commit:
            await self._send(sent)
        # A credit is topped up at each pass; a closed gate is written when it closes,
        # and when jobs held behind it arrived (which clears its mark, see ``gate``).
        credit_taken = False
        if credit or q.credit != 0 or arrived:
            credit_taken = await self._store.gate(queue, credit)
            q.credit = credit
        q.quiet = not (sent or arrived or q.shares.active or credit_taken)
        return len(sent)

    async def _release(self, q: _Queue, turn: ReleaseTurn) -> list[JobMessage]:
        """Release held jobs, in fair order, as many as the credit has room for: their
        messages, in that order."""
        budget = self._settings.ready_target - await self._gauge.ready(q.queue)
        await self._note_figures(q, turn)
        if budget < self._least:
            # Too little room for a pass worth its cost (each costs about the same
            # whatever it releases): let the workers take a few more first.
            return []
        picks = await self._pick(q, turn, budget)
        if not picks:
            return []
        released = await turn.release(picks, self._clock.now())
        order = {job_id: n for n, job_id in enumerate(picks)}
        released.sort(key=lambda job: order[job.id])
        q.drained += len(released)
        return [message_for(job, self._catalog.get(job.type)) for job in released]

    async def _credit(self, turn: ReleaseTurn, queue: str) -> int:
        """With no held backlog: how many enqueues may publish their jobs at once (the
        fast path), which is the room left in the broker (the credit less the messages
        ready), so that a burst of enqueues holds its jobs once that much went straight
        out. None while anything is paused (a paused job's message would only come
        back), nor with dispatch off (nothing is held then)."""
        if not self._settings.enabled or turn.paused:
            return 0
        return max(0, self._settings.ready_target - await self._gauge.ready(queue))

    async def _note_figures(self, q: _Queue, turn: ReleaseTurn) -> None:
        """About once a second while the queue has a backlog, its drain (the jobs
        released per second, which the workers' credit paces) and its active tenants'
        weights, for a waiting job's estimate of when it starts."""
        now = time.monotonic()
        if q.drained_since is None:
            q.drained_since, q.drained = now, 0
            return
        elapsed = now - q.drained_since
        if elapsed < FIGURES_EVERY_S:
            return
        rate = q.drained / elapsed
        q.drain_per_s = rate if q.drain_per_s is None else (q.drain_per_s + rate) / 2
        weight = sum(q.weights.get(tenant, 1.0) for tenant in q.keys)
        await turn.figures(q.drain_per_s, weight)
        q.drained_since, q.drained = now, 0

    async def _learn(self, q: _Queue, turn: ReleaseTurn, at: datetime) -> int:
        """Which lines have held jobs, with their tenants' weights: the arrivals noted
        since the last pass, and all of them when the lease is new or `rediscover_s` has
        passed (an arrival noted by a transaction that committed after a pass found its
        line empty), and the lines whose jobs held for later came due (every
        DUE_EVERY_S). The weights are read every WEIGH_EVERY_S. How many lines arrived."""
        now = time.monotonic()
        if now - q.weighed_at >= WEIGH_EVERY_S:
            q.weighed_at = now
            q.weights = await turn.weights()
            for tenant in q.keys:  # a weight changed applies at once
                q.weigh(tenant)
        arrived = await turn.arrivals()
        lines = list(arrived)
        if now - q.discovered_at >= self._settings.rediscover_s:
            q.discovered_at = q.due_looked_at = now
            q.due_since = at
            lines += await turn.lines()
        elif q.due_since is not None and now - q.due_looked_at >= DUE_EVERY_S:
            q.due_looked_at = now
            lines += await turn.came_due(q.due_since)
            q.due_since = at
        for line in lines:
            q.activate(line)
        return len(arrived)

    async def _pick(self, q: _Queue, turn: ReleaseTurn, budget: int) -> list[JobId]:
        """Up to `budget` held jobs, in fair order: each round plans the next releases,
        reads the lines that have too few heads, and drops a line that is empty."""
        picks: list[JobId] = []
        taken: Counter[Line] = Counter()  # picked this pass, per line
        while len(picks) < budget and q.shares.active:
            plan = q.shares.plan(budget - len(picks))
            wanted = Counter(plan)
            short = {
                line: max(HEADS, count + taken[line])
                for line, count in wanted.items()
                if len(q.heads.get(line, ())) < count and line not in q.dry
            }
            if short:
                chosen = set(picks)
                for line, ids in (await turn.heads(short)).items():
                    q.heads[line] = deque(i for i in ids if i not in chosen)
                    if len(ids) < short[line]:
                        q.dry.add(line)  # its last heads: no read when they are gone
                for line in short.keys() - q.heads.keys():
                    q.heads[line] = deque()
            for line in plan:
                heads = q.heads.get(line)
                if not heads:  # the line is empty: plan again without it
                    q.deactivate(line)
                    break
                picks.append(heads.popleft())
                taken[line] += 1
                q.shares.charge(line)
        return picks

    async def _send(self, messages: Sequence[JobMessage]) -> None:
        if not messages:
            return
        results = await self._sender.send(messages)
        failed = [error for error in results if error is not None]
        if failed:
            raise BrokerUnavailableError(
                f"{len(failed)} of {len(messages)} released messages were not confirmed "
                f"({failed[0]})"
            )
