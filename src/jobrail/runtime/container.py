"""The composition root shared by the API and the workers (dishka providers).

APP scope: settings, clock, engine, broker, registry, runner.
REQUEST scope (one per HTTP request and one per task): unit of work and use cases.
"""

from collections.abc import AsyncIterator
from datetime import timedelta
from enum import Enum

from dishka import AnyOf, Provider, Scope, from_context, provide
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from jobrail.events.catalog import EventCatalog
from jobrail.jobs.cancel import CancelJob, CancelJobs
from jobrail.jobs.enqueue import EnqueueJob, EnqueueOpenJob
from jobrail.jobs.flow_service import FlowService
from jobrail.jobs.get import GetJob
from jobrail.jobs.intake import JobCatalog
from jobrail.jobs.listing import ListJobs
from jobrail.jobs.operator_reads import OpsReadModel
from jobrail.jobs.ports import JobsUnitOfWork
from jobrail.jobs.priority import LineRules
from jobrail.jobs.publishing import OutboxDispatcher, OutboxMarks, Publisher
from jobrail.jobs.registry import JobRegistry
from jobrail.jobs.retry import RetryPolicy
from jobrail.jobs.workflows import Workflows
from jobrail.kernel.clock import Clock, SystemClock
from jobrail.limits.api import ApiRateLimiter
from jobrail.limits.counters import LimitCounters
from jobrail.limits.memory import MemoryLimits
from jobrail.limits.model import LimitsBackend
from jobrail.limits.redis import RedisLimits, redis_client
from jobrail.outbox.committing import AfterCommit, DetachedDispatch, EnvelopeStore, statement_units
from jobrail.outbox.relay import OutboxPublisher, OutboxRelay, SqlaOutboxMarks
from jobrail.outbox.uow import SqlaUnitOfWork, UnitOfWorkFactory
from jobrail.settings import Settings
from jobrail.store.attempt_failures import SqlaAttemptFailures
from jobrail.store.engine import close_engine, create_engine, create_sessionmaker
from jobrail.store.jobs import SqlaJobIntake, SqlaJobStore
from jobrail.store.pg_intake import PgJobIntake, PgOutboxMarks
from jobrail.store.pg_job_store import PgJobStore
from jobrail.store.pg_pool import PgPool, create_pool
from jobrail.store.tenants import SqlaTenantDirectory
from jobrail.telemetry.backlog import Backlog
from jobrail.telemetry.instruments import Instruments
from jobrail.telemetry.metrics import Metrics
from jobrail.tenants.ports import TenantDirectory
from jobrail.tenants.use_cases import (
    Authenticate,
    CreateTenant,
    IssueApiKey,
    RevokeApiKey,
    SetQueuedCap,
    SetTenantWeight,
)
from jobrail.transport.brokers import JobBroker
from jobrail.transport.codec import MessagePublisher
from jobrail.worker.admission import LimitsAndLock
from jobrail.worker.failure_notes import FailureNotes
from jobrail.worker.failures import AttemptFailures
from jobrail.worker.flow_recording import FlowRecordingStore
from jobrail.worker.gate import GateConfig, JobGate
from jobrail.worker.job_store import JobStore
from jobrail.worker.runner import JobRunner, RunnerConfig
from jobrail.worker.running import RunningJobs
from jobrail.worker.wait_notes import WaitNotes


class ProcessRole(Enum):
    """Which kind of process the container serves: the API batches nothing (latency
    first), workers gather calls for a moment (throughput first)."""

    API = "api"
    WORKER = "worker"


class PlatformProvider(Provider):
    settings = from_context(provides=Settings, scope=Scope.APP)
    registry = from_context(provides=JobRegistry, scope=Scope.APP)
    event_catalog = from_context(provides=EventCatalog, scope=Scope.APP)
    role = from_context(provides=ProcessRole, scope=Scope.APP)
    broker = from_context(provides=JobBroker, scope=Scope.APP)
    clock = provide(SystemClock, provides=Clock, scope=Scope.APP)

    @provide(scope=Scope.APP)
    async def engine(
        self, settings: Settings, instruments: Instruments
    ) -> AsyncIterator[AsyncEngine]:
        engine = create_engine(settings.database)
        instruments.engine(engine)
        yield engine
        await close_engine(engine)

    @provide(scope=Scope.APP)
    def sessionmaker(self, engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
        return create_sessionmaker(engine)

    @provide(scope=Scope.APP)
    def catalog(self, registry: JobRegistry) -> JobCatalog:
        return registry

    @provide(scope=Scope.APP)
    def publisher(self, broker: JobBroker) -> Publisher:
        return MessagePublisher(broker)

    @provide(scope=Scope.APP)
    async def pg_pool(self, settings: Settings) -> AsyncIterator[PgPool | None]:
        """asyncpg's own pool for the hot paths on Postgres (None on SQLite)."""
        if settings.database.is_sqlite:
            yield None
            return
        pool = await create_pool(settings.database)
        yield pool
        await pool.close()

    @provide(scope=Scope.APP)
    async def pg_outbox_marks(
        self, pool: PgPool | None, settings: Settings
    ) -> AsyncIterator[PgOutboxMarks | None]:
        """Marks that ride along with the next enqueue statement (None on SQLite)."""
        if pool is None:
            yield None
            return
        marks = PgOutboxMarks(pool, delay_s=settings.outbox.mark_delay_s)
        yield marks
        await marks.close()  # before the pool closes

    @provide(scope=Scope.APP)
    def outbox_marks(self, pg_marks: PgOutboxMarks | None, engine: AsyncEngine) -> OutboxMarks:
        return pg_marks if pg_marks is not None else SqlaOutboxMarks(engine)

    @provide(scope=Scope.APP)
    def job_intake(
        self,
        pool: PgPool | None,
        pg_marks: PgOutboxMarks | None,
        sessionmaker: async_sessionmaker[AsyncSession],
    ) -> EnvelopeStore:
        """The store EnqueueJob's own transactions write to: one statement each."""
        if pool is not None:
            return PgJobIntake(pool, marks=pg_marks)
        return SqlaJobIntake(sessionmaker)

    @provide(scope=Scope.APP)
    async def after_commit(
        self, publisher: OutboxPublisher, metrics: Metrics
    ) -> AsyncIterator[AfterCommit]:
        """What follows every commit that enqueued: the fast path, detached (a 202 does
        not wait for the broker's confirms), and the count. Closing waits for the
        publishes under way, before the broker they use closes."""
        detached = DetachedDispatch(publisher.envelopes)
        yield AfterCommit(detached, metrics.jobs)
        await detached.drain()

    @provide(scope=Scope.APP)
    def metrics(
        self,
        registry: JobRegistry,
        counters: LimitCounters,
        broker: JobBroker,
        reads: OpsReadModel,
        clock: Clock,
        settings: Settings,
    ) -> Metrics:
        backlog = Backlog(
            broker,
            reads,
            clock,
            settings.rabbit.dead_letter_queue,
            ttl_s=settings.metrics.lookup_ttl_s,
            timeout_s=settings.metrics.lookup_timeout_s,
        )
        return Metrics((spec.name for spec in registry), counters, backlog)

    @provide(scope=Scope.APP)
    def dispatcher(
        self,
        marks: OutboxMarks,
        broker: JobBroker,
        clock: Clock,
        settings: Settings,
    ) -> AnyOf[OutboxPublisher, OutboxDispatcher]:
        return OutboxPublisher(
            marks, broker, clock, timedelta(seconds=settings.outbox.fast_path_timeout_s)
        )

    @provide(scope=Scope.APP)
    def relay(
        self,
        engine: AsyncEngine,
        broker: JobBroker,
        clock: Clock,
        catalog: JobCatalog,
        settings: Settings,
    ) -> OutboxRelay:
        return OutboxRelay(
            engine,
            broker,
            clock,
            catalog,
            batch=settings.outbox.relay_batch,
            min_age=timedelta(seconds=settings.outbox.relay_min_age_s),
            interval=timedelta(seconds=settings.outbox.relay_interval_s),
        )

    @provide(scope=Scope.APP)
    def retry_policy(self, settings: Settings, registry: JobRegistry) -> RetryPolicy:
        return RetryPolicy(
            base_s=settings.retry.base_s,
            cap_s=settings.retry.cap_s,
            jitter=settings.retry.jitter == "full",
            max_attempts_unknown=settings.retry.max_attempts_unknown,
            own_max_attempts=registry.own_max_attempts(),
        )

    @provide(scope=Scope.APP)
    async def limits_backend(
        self, settings: Settings, role: ProcessRole, instruments: Instruments
    ) -> AsyncIterator[LimitsBackend]:
        """Redis in stack mode, process memory in embedded mode."""
        if settings.embedded:
            yield MemoryLimits()
            return
        redis = redis_client(settings.redis)
        instruments.redis(redis)
        window = settings.worker.batch_window_ms / 1000 if role is ProcessRole.WORKER else 0.0
        backend = RedisLimits(redis, key_prefix=settings.redis.key_prefix, window_s=window)
        yield backend
        await backend.close()

    @provide(scope=Scope.APP)
    def limit_counters(self) -> LimitCounters:
        return LimitCounters()

    @provide(scope=Scope.APP)
    async def job_gate(
        self, backend: LimitsBackend, counters: LimitCounters, settings: Settings
    ) -> AsyncIterator[JobGate]:
        config = GateConfig(
            contention_retry=timedelta(seconds=settings.limits.contention_retry_s),
            jitter=settings.limits.deferral_jitter,
            unavailable_retry_max=timedelta(seconds=settings.limits.unavailable_retry_max_s),
        )
        gate = JobGate(backend, counters, config)
        yield gate
        await gate.close()  # before the backend's client is closed

    @provide(scope=Scope.APP)
    def api_rate_limiter(
        self, backend: LimitsBackend, counters: LimitCounters, settings: Settings
    ) -> ApiRateLimiter:
        return ApiRateLimiter(backend, settings.api_limits, counters)

    @provide(scope=Scope.APP)
    def tenant_directory(self, engine: AsyncEngine) -> TenantDirectory:
        return SqlaTenantDirectory(engine)

    @provide(scope=Scope.APP)
    def authenticate(self, directory: TenantDirectory, settings: Settings) -> Authenticate:
        return Authenticate(
            directory,
            ttl_s=settings.auth.key_cache_ttl_s,
            seen_live_s=settings.auth.seen_live_s,
        )

    create_tenant = provide(CreateTenant, scope=Scope.APP)
    issue_api_key = provide(IssueApiKey, scope=Scope.APP)
    set_queued_cap = provide(SetQueuedCap, scope=Scope.APP)
    set_tenant_weight = provide(SetTenantWeight, scope=Scope.APP)
    revoke_api_key = provide(RevokeApiKey, scope=Scope.APP)

    @provide(scope=Scope.APP)
    def job_store(
        self,
        pool: PgPool | None,
        engine: AsyncEngine,
        settings: Settings,
    ) -> JobStore:
        if pool is None:
            return SqlaJobStore(engine)
        return PgJobStore(pool, window_s=settings.worker.batch_window_ms / 1000)

    @provide(scope=Scope.APP)
    def attempt_failures(self, engine: AsyncEngine) -> AttemptFailures:
        return SqlaAttemptFailures(engine)

    @provide(scope=Scope.APP)
    async def runner(
        self,
        store: JobStore,
        dispatcher: OutboxDispatcher,
        publisher: Publisher,
        clock: Clock,
        retry: RetryPolicy,
        gate: JobGate,
        settings: Settings,
        metrics: Metrics,
        factory: UnitOfWorkFactory,
        running: RunningJobs,
        failures: AttemptFailures,
    ) -> AsyncIterator[JobRunner]:
        config = RunnerConfig(
            dead_letter_queue=settings.rabbit.dead_letter_queue,
            lease_grace=timedelta(seconds=settings.jobs.lease_grace_s),
            store_retry_max=timedelta(seconds=settings.jobs.store_retry_max_s),
            lease=timedelta(seconds=settings.jobs.lease_s),
            max_result_bytes=settings.jobs.max_result_bytes,
            progress_interval=timedelta(milliseconds=settings.jobs.progress_interval_ms),
        )
        # The attempt's middleware, in order: each lets the delivery in after those before
        # it, and lets go of it before them.
        failure_notes = FailureNotes(failures)
        middleware = (LimitsAndLock(gate, clock), running, failure_notes)
        wait_notes = WaitNotes(store)
        yield JobRunner(
            store,
            dispatcher,
            publisher,
            clock,
            retry,
            config,
            middleware,
            observer=metrics.jobs,
            wait_notes=wait_notes,
            # The end of a batch's or chain's member is recorded with what it does to
            # the rest; every other job's outcome goes to the store's one statement.
            flows=FlowRecordingStore(store, lambda: factory(SqlaUnitOfWork), factory.workflows),
        )
        await wait_notes.close()  # before the store's connections close
        await failure_notes.close()

    @provide(scope=Scope.APP)
    def uow_factory(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        publisher: OutboxPublisher,
        clock: Clock,
        events: EventCatalog,
        catalog: JobCatalog,
        settings: Settings,
        metrics: Metrics,
        after_commit: AfterCommit,
    ) -> UnitOfWorkFactory:
        return UnitOfWorkFactory(
            sessionmaker,
            publisher.envelopes,
            clock,
            events,
            catalog,
            settings.retry.max_attempts,
            enqueued=metrics.jobs,
            after_commit=after_commit,
            hold=LineRules.of(settings.dispatch),
        )

    @provide(scope=Scope.REQUEST)
    def unit_of_work(self, factory: UnitOfWorkFactory) -> AnyOf[SqlaUnitOfWork, JobsUnitOfWork]:
        return factory(SqlaUnitOfWork)

    @provide(scope=Scope.APP)
    def enqueue_job(
        self,
        intake: EnvelopeStore,
        after_commit: AfterCommit,
        catalog: JobCatalog,
        clock: Clock,
        settings: Settings,
    ) -> EnqueueJob:
        return EnqueueJob(
            statement_units(intake, after_commit),
            catalog,
            clock,
            settings.retry.max_attempts,
            hold=LineRules.of(settings.dispatch),
        )

    @provide(scope=Scope.APP)
    def enqueue_open_job(self, enqueue: EnqueueJob, catalog: JobCatalog) -> EnqueueOpenJob:
        return EnqueueOpenJob(enqueue, catalog)

    @provide(scope=Scope.APP)
    def workflows(self, factory: UnitOfWorkFactory) -> Workflows:
        return factory.workflows

    @provide(scope=Scope.APP)
    def flow_service(self, factory: UnitOfWorkFactory) -> FlowService:
        return FlowService(lambda: factory(SqlaUnitOfWork), factory.workflows)

    get_job = provide(GetJob, scope=Scope.REQUEST)
    list_jobs = provide(ListJobs, scope=Scope.REQUEST)
    cancel_job = provide(CancelJob, scope=Scope.REQUEST)
    cancel_jobs = provide(CancelJobs, scope=Scope.REQUEST)
