"""The worker's receiver: job messages run through their route in batches, each delivery
acknowledged only after its outcome is recorded, in the trace of their enqueue; anything
else takes Taskiq's path."""

import asyncio
import copy
import dataclasses
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from dishka import Provider, Scope, make_async_container, provide
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel
from taskiq import AckableMessage, InMemoryBroker, TaskiqMessage
from taskiq.receiver.receiver import _PrefetchedMessage, _QueueSignal

from jobrail.jobs.domain import Job, JobStatus
from jobrail.jobs.messages import JobMessage, Outgoing
from jobrail.jobs.ports import ClaimToken
from jobrail.jobs.registry import JobRegistry, job
from jobrail.jobs.retry import RetryPolicy
from jobrail.kernel.batching import Coalescer
from jobrail.settings import TelemetrySettings
from jobrail.telemetry.propagation import current_trace_context
from jobrail.telemetry.tracing import configure_tracing, use_tracer_provider
from jobrail.transport.codec import encode
from jobrail.transport.receiver import JobReceiver
from jobrail.transport.tasks import JobRoutes, register_job_tasks
from jobrail.worker.context import JobContext
from jobrail.worker.job_store import ClaimResult, JobIdentity
from jobrail.worker.runner import JobRunner, RunnerConfig
from tests.fakes import FakeDispatcher, FakeJobStore, FakePublisher, FixedClock, make_job


class Echo(BaseModel):
    message: str


@job("test.echo", payload=Echo)
async def echo(payload: Echo, ctx: JobContext) -> dict[str, str]:
    return {"echo": payload.message}


class BatchCountingStore(FakeJobStore):
    """The fake store behind the coalescing a real store does: the claims made in one
    event-loop turn travel together, and each such batch is counted."""

    def __init__(self, events: list[str]) -> None:
        super().__init__()
        self.events = events
        self.claim_batches: list[int] = []
        self._claims: Coalescer[Any, ClaimResult] = Coalescer(self._claim_many)

    async def claim(
        self, job_id: Any, now: Any, lease: timedelta, expect: JobIdentity | None = None
    ) -> ClaimResult:
        return await self._claims.submit((job_id, now, lease, expect))

    async def _claim_many(self, claims: Sequence[Any]) -> list[ClaimResult]:
        self.claim_batches.append(len(claims))
        return [await FakeJobStore.claim(self, *claim) for claim in claims]

    async def record(self, job: Job, claim: ClaimToken, outbox: Sequence[Outgoing]) -> bool:
        recorded = await super().record(job, claim, outbox)
        self.events.append(f"record {job.id}")
        return recorded


class ReadyBroker(InMemoryBroker):
    """A broker that has received `ready` and not yielded it yet (as jobrail's AMQP
    broker does while Taskiq's prefetcher is a few loop turns behind)."""

    def __init__(self) -> None:
        super().__init__()
        self.ready: list[AckableMessage] = []

    def take_ready(self, limit: int) -> list[AckableMessage]:
        taken, self.ready = self.ready[:limit], self.ready[limit:]
        return taken


def _receiver(
    store: FakeJobStore,
    window_s: float,
    jobs: Sequence[Any] = (echo,),
    *,
    broker: InMemoryBroker | None = None,
    wave_size: int = 1,
    wave_wait_s: float = 0.0,
    max_async_tasks: int = 64,
) -> tuple[JobReceiver, InMemoryBroker]:
    clock = FixedClock()
    runner = JobRunner(
        store,
        FakeDispatcher(),
        FakePublisher(),
        clock,
        RetryPolicy(base_s=1, cap_s=60, jitter=False),
        RunnerConfig(
            dead_letter_queue="jobs.dlq",
            lease_grace=timedelta(seconds=10),
            store_retry_max=timedelta(seconds=1),
        ),
    )

    class Runner(Provider):
        @provide(scope=Scope.APP)
        def runner(self) -> JobRunner:
            return runner

    broker = broker or InMemoryBroker()
    registry = JobRegistry(list(jobs), queues=["jobs.default"], default_timeout_s=10)
    routes = JobRoutes(
        registry,
        "jobs.default",
        batch_window_s=window_s,
        wave_size=wave_size,
        wave_wait_s=wave_wait_s,
    )
    register_job_tasks(broker, routes)
    routes.use(make_async_container(Runner()))
    return JobReceiver(broker, max_async_tasks=max_async_tasks), broker


def _stored_echoes(store: FakeJobStore, count: int) -> list[Job]:
    """`count` echo jobs, in `store`."""
    jobs = [make_job(type="test.echo", payload={"message": f"m{n}"}) for n in range(count)]
    for job_ in jobs:
        store.jobs[job_.id] = job_
    return jobs


async def _deliver(
    receiver: JobReceiver, jobs: list[Job], events: list[str], *, trickle: bool
) -> None:
    """Hand the jobs' messages to the receiver's runner as Taskiq's prefetcher does (one
    per loop turn with `trickle`), then stop it."""
    queue: asyncio.Queue[Any] = asyncio.Queue()
    runner = asyncio.ensure_future(receiver.runner(queue))
    for job_ in jobs:

        async def ack(job_id: Any = job_.id) -> None:
            events.append(f"ack {job_id}")

        body = encode(JobMessage.of(job_)).body
        queue.put_nowait(_PrefetchedMessage(AckableMessage(data=body, ack=ack), False))
        if trickle:
            await asyncio.sleep(0)
    queue.put_nowait(_QueueSignal.DONE)
    await asyncio.wait_for(runner, 10)


async def test_each_delivery_is_acknowledged_only_after_its_outcome_is_recorded() -> None:
    events: list[str] = []
    store = BatchCountingStore(events)
    jobs = _stored_echoes(store, 5)
    receiver, _broker = _receiver(store, window_s=0.005)

    await _deliver(receiver, jobs, events, trickle=False)

    for job_ in jobs:
        assert store.jobs[job_.id].status is JobStatus.SUCCEEDED
        assert store.jobs[job_.id].result == {"echo": job_.payload["message"]}
        assert events.count(f"ack {job_.id}") == 1
        assert events.index(f"record {job_.id}") < events.index(f"ack {job_.id}")


async def test_deliveries_that_arrive_within_the_window_are_claimed_together() -> None:
    jobs = [make_job(type="test.echo", payload={"message": f"m{n}"}) for n in range(8)]
    batches = {}
    for window_s in (0.05, 0.0):
        events: list[str] = []
        store = BatchCountingStore(events)
        for job_ in jobs:
            store.jobs[job_.id] = copy.deepcopy(job_)
        receiver, _broker = _receiver(store, window_s=window_s)
        await _deliver(receiver, jobs, events, trickle=True)
        assert all(store.jobs[j.id].status is JobStatus.SUCCEEDED for j in jobs)
        batches[window_s] = store.claim_batches

    # Within the window, the eight deliveries start together: one claim for all.
    assert batches[0.05] == [8]
    # Without it, each starts as it arrives (the check that the window is what groups them).
    assert len(batches[0.0]) > 1


def _delivery(job_: Job, events: list[str]) -> AckableMessage:
    async def ack() -> None:
        events.append(f"ack {job_.id}")

    return AckableMessage(data=encode(JobMessage.of(job_)).body, ack=ack)


async def _acked(events: list[str], jobs: Sequence[Job]) -> None:
    """Wait (at most 10 s, long enough on any machine) until every job is acknowledged."""

    async def all_acked() -> None:
        while not all(f"ack {job_.id}" in events for job_ in jobs):
            await asyncio.sleep(0.001)

    await asyncio.wait_for(all_acked(), 10)


async def test_deliveries_the_broker_has_received_start_with_the_one_handed_over() -> None:
    events: list[str] = []
    store = BatchCountingStore(events)
    jobs = _stored_echoes(store, 8)
    broker = ReadyBroker()
    receiver, _ = _receiver(store, window_s=0.0, broker=broker)
    # Taskiq's prefetcher hands over the first; the broker holds the seven behind it.
    broker.ready = [_delivery(job_, events) for job_ in jobs[1:]]
    queue: asyncio.Queue[Any] = asyncio.Queue()
    runner = asyncio.ensure_future(receiver.runner(queue))
    queue.put_nowait(_PrefetchedMessage(_delivery(jobs[0], events), False))

    await _acked(events, jobs)
    queue.put_nowait(_QueueSignal.DONE)
    await asyncio.wait_for(runner, 10)

    assert store.claim_batches == [8]
    assert broker.ready == []


releases: list[asyncio.Event] = []  # the current test's (an Event is bound to its loop)


@job("test.busy", payload=Echo)
async def busy(payload: Echo, ctx: JobContext) -> None:
    await releases[-1].wait()


async def _claims_while_busy(
    wave_size: int, wave_wait_s: float, busy_jobs: int, max_async_tasks: int = 64, echoes: int = 4
) -> list[int]:
    """The claim batches of `echoes` echo jobs delivered one at a time while `busy_jobs`
    other jobs run: each once the one before is claimed, or held (100 loop turns). Loop
    turns, not milliseconds: on a loaded machine two deliveries 1 ms apart could meet
    in one claim without any wave."""
    release = asyncio.Event()
    releases.append(release)
    events: list[str] = []
    store = BatchCountingStore(events)
    running = [make_job(type="test.busy", payload={"message": "b"}) for _ in range(busy_jobs)]
    jobs = [make_job(type="test.echo", payload={"message": f"m{n}"}) for n in range(echoes)]
    for job_ in [*running, *jobs]:
        store.jobs[job_.id] = job_
    receiver, _ = _receiver(
        store,
        0.0,
        jobs=[echo, busy],
        wave_size=wave_size,
        wave_wait_s=wave_wait_s,
        max_async_tasks=max_async_tasks,
    )
    queue: asyncio.Queue[Any] = asyncio.Queue()
    runner = asyncio.ensure_future(receiver.runner(queue))
    for job_ in running:
        queue.put_nowait(_PrefetchedMessage(_delivery(job_, events), False))
    while sum(store.claim_batches) < busy_jobs:  # they run (claimed, in their handler)
        await asyncio.sleep(0)
    store.claim_batches.clear()
    try:
        for job_ in jobs:
            claimed = sum(store.claim_batches)
            queue.put_nowait(_PrefetchedMessage(_delivery(job_, events), False))
            for _ in range(100):
                await asyncio.sleep(0)
                if sum(store.claim_batches) > claimed:
                    break
        await _acked(events, jobs)
    finally:
        release.set()
    queue.put_nowait(_QueueSignal.DONE)
    await asyncio.wait_for(runner, 10)
    return store.claim_batches


async def test_a_busy_worker_starts_deliveries_in_waves() -> None:
    # Four jobs run: the deliveries wait for one another (the wait is far longer than
    # the test) and start as one wave as soon as it is full.
    assert await _claims_while_busy(wave_size=4, wave_wait_s=60.0, busy_jobs=4) == [4]
    # Without waves, each starts as it arrives.
    assert await _claims_while_busy(wave_size=4, wave_wait_s=0.0, busy_jobs=4) == [1, 1, 1, 1]


async def test_a_worker_running_fewer_jobs_than_a_wave_holds_no_delivery() -> None:
    # Three jobs run, fewer than a wave: a delivery that waited for its wave would wait
    # 60 s, and the test (10 s at most) would fail.
    assert await _claims_while_busy(wave_size=4, wave_wait_s=60.0, busy_jobs=3) == [1, 1, 1, 1]


async def test_a_wave_is_no_larger_than_the_slots_left_free() -> None:
    # Six may run at once and four do: two slots are free, so two deliveries make a
    # wave (holding for a wave of four would wait 60 s, and the test fail at 10 s).
    claims = await _claims_while_busy(
        wave_size=4, wave_wait_s=60.0, busy_jobs=4, max_async_tasks=6, echoes=2
    )
    assert claims == [2]


async def test_a_message_that_is_not_a_job_message_takes_taskiqs_path() -> None:
    events: list[str] = []
    store = BatchCountingStore(events)
    receiver, broker = _receiver(store, window_s=0.0)
    ran: list[int] = []

    @broker.task(task_name="plain.task")
    async def plain(n: int) -> None:
        ran.append(n)

    body = broker.formatter.dumps(
        TaskiqMessage(task_id="t2", task_name="plain.task", labels={}, args=[8], kwargs={})
    ).message
    acked: list[bool] = []

    async def ack() -> None:
        acked.append(True)

    await receiver.callback(AckableMessage(data=body, ack=ack))

    assert ran == [8]
    assert acked == [True]
    assert store.claim_batches == []


async def test_a_delivery_the_consumer_decoded_is_not_decoded_again() -> None:
    from jobrail.transport.screening import ScreenedMessage

    events: list[str] = []
    store = BatchCountingStore(events)
    job_ = make_job(type="test.echo", payload={"message": "once"})
    store.jobs[job_.id] = job_
    receiver, _broker = _receiver(store, window_s=0.0)
    acked: list[bool] = []

    async def ack() -> None:
        acked.append(True)

    # The body is not even JSON: only the decoded job message can have run the job.
    message = ScreenedMessage(data=b"decoded already", ack=ack, job=JobMessage.of(job_))
    await receiver.callback(message)

    assert store.jobs[job_.id].status is JobStatus.SUCCEEDED
    assert acked == [True]


seen_traces: list[int] = []


@job("test.traced", payload=Echo)
async def traced(payload: Echo, ctx: JobContext) -> None:
    seen_traces.append(trace.get_current_span().get_span_context().trace_id)


async def _run_traced(labels: dict[str, str]) -> None:
    store = FakeJobStore()
    job_ = make_job(type="test.traced", payload={"message": "hi"})
    store.jobs[job_.id] = job_
    receiver, _broker = _receiver(store, window_s=0.0, jobs=[traced])
    routes = receiver._routes
    assert routes is not None
    await routes.run(dataclasses.replace(JobMessage.of(job_), trace_context=labels))
    assert store.jobs[job_.id].status is JobStatus.SUCCEEDED


async def _enqueued_and_run() -> trace.Span:
    """Run a job whose message carries the trace context of an `enqueue` span (returned),
    with the tracer provider set beforehand; then set none."""
    seen_traces.clear()
    try:
        with trace.get_tracer("tests").start_as_current_span("enqueue") as enqueue:
            labels = current_trace_context()
        await _run_traced(labels)
    finally:
        use_tracer_provider(None)
    return enqueue


async def test_without_an_exporter_a_job_runs_in_its_enqueues_trace_without_a_span() -> None:
    configure_tracing(TelemetrySettings())  # no endpoint: nothing is recorded
    enqueue = await _enqueued_and_run()

    assert seen_traces == [enqueue.get_span_context().trace_id]


async def test_with_an_exporter_a_job_runs_in_a_span_of_its_own() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use_tracer_provider(provider)
    enqueue = await _enqueued_and_run()

    [run] = [span for span in exporter.get_finished_spans() if span.name == "run test.traced"]
    assert run.parent is not None
    assert run.parent.span_id == enqueue.get_span_context().span_id
    assert seen_traces == [enqueue.get_span_context().trace_id]
