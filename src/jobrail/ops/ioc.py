"""The ops room's dishka provider: what operators' routes and the console use (the
dead-letter queue and queue depths, the platform's read model, the limits' admin), and
their use cases."""

from dishka import Provider, Scope, from_context, provide
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.events.persistence import SqlaJobEventLog
from jobrail.jobs.operator_reads import OpsReadModel, QueueStats
from jobrail.jobs.ports import JobsUnitOfWork
from jobrail.jobs.registry import JobRegistry
from jobrail.limits.model import LimitsBackend
from jobrail.ops.bulk import BulkJobs, RedriveJobs
from jobrail.ops.bulk_store import SqlaBulkJobs
from jobrail.ops.dead_letters import ListDeadLetters, PurgeDeadLetters, RedriveDeadLetters
from jobrail.ops.job_search import JobSearch, SearchJobs
from jobrail.ops.limits import LimitsAdmin
from jobrail.ops.overview import GetOpsOverview
from jobrail.ops.overview_data import GetOverviewData
from jobrail.ops.persistence import SqlaJobSearch, SqlaOpsReadModel
from jobrail.ops.ports import DeadLetterQueue
from jobrail.ops.redrive import RedriveJob
from jobrail.ops.schedule_reads import SqlaScheduleFires
from jobrail.ops.schedules import DeclaredSchedules, ListSchedules, ScheduleFires
from jobrail.ops.views import GetOpsFlow, GetOpsJob, ListOpsFlows, ListOpsJobs
from jobrail.settings import Settings
from jobrail.transport.brokers import JobBroker
from jobrail.webhooks.use_cases import GetWebhooksOverview
from jobrail.worker.failures import AttemptFailures


class OpsProvider(Provider):
    @provide(scope=Scope.APP)
    def limits_admin(self, registry: JobRegistry, backend: LimitsBackend) -> LimitsAdmin:
        return LimitsAdmin(registry, backend)

    redrive_job = provide(RedriveJob, scope=Scope.REQUEST)

    redrive_jobs = provide(RedriveJobs, scope=Scope.REQUEST)

    @provide(scope=Scope.APP)
    def bulk_jobs(self, engine: AsyncEngine) -> BulkJobs:
        return SqlaBulkJobs(engine)

    @provide(scope=Scope.APP)
    def dead_letter_queue(self, broker: JobBroker) -> DeadLetterQueue:
        return broker

    @provide(scope=Scope.APP)
    def queue_stats(self, broker: JobBroker) -> QueueStats:
        return broker

    @provide(scope=Scope.APP)
    def ops_reads(self, engine: AsyncEngine) -> OpsReadModel:
        return SqlaOpsReadModel(engine)

    ops_overview = provide(GetOpsOverview, scope=Scope.APP)

    @provide(scope=Scope.APP)
    def overview_data(
        self,
        overview: GetOpsOverview,
        flows: ListOpsFlows,
        webhooks: GetWebhooksOverview,
        settings: Settings,
    ) -> GetOverviewData:
        return GetOverviewData(overview, flows, webhooks, settings.ops.overview_cache_s)

    @provide(scope=Scope.APP)
    def job_search(self, engine: AsyncEngine) -> JobSearch:
        return SqlaJobSearch(engine)

    search_jobs = provide(SearchJobs, scope=Scope.APP)

    ops_flows = provide(ListOpsFlows, scope=Scope.APP)

    ops_flow = provide(GetOpsFlow, scope=Scope.REQUEST)

    ops_jobs = provide(ListOpsJobs, scope=Scope.REQUEST)

    list_dead_letters = provide(ListDeadLetters, scope=Scope.APP)

    redrive_dead_letters = provide(RedriveDeadLetters, scope=Scope.REQUEST)

    purge_dead_letters = provide(PurgeDeadLetters, scope=Scope.APP)

    @provide(scope=Scope.REQUEST)
    def ops_job(
        self, uow: JobsUnitOfWork, log: SqlaJobEventLog, failures: AttemptFailures
    ) -> GetOpsJob:
        return GetOpsJob(uow, log, failures)

    declared_schedules = from_context(provides=DeclaredSchedules, scope=Scope.APP)

    @provide(scope=Scope.APP)
    def schedule_fires(self, engine: AsyncEngine) -> ScheduleFires:
        return SqlaScheduleFires(engine)

    list_schedules = provide(ListSchedules, scope=Scope.APP)
