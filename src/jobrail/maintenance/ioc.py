from datetime import timedelta

from dishka import Provider, Scope, provide
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.events.persistence import SqlaJobEventLog
from jobrail.jobs.operator_reads import OpsReadModel
from jobrail.kernel.clock import Clock
from jobrail.maintenance.persistence import (
    SqlaFinishedFlows,
    SqlaFinishedJobs,
    SqlaProcessedInbox,
    SqlaPublishedOutbox,
)
from jobrail.maintenance.ports import OverviewSampleStore
from jobrail.maintenance.sample_sql import SqlaOverviewSamples
from jobrail.maintenance.sampling import SampleOverview
from jobrail.maintenance.use_cases import (
    CheckOutboxLag,
    PruneFinishedJobs,
    PruneMessages,
    ReportDeadLetters,
)
from jobrail.settings import Settings
from jobrail.transport.brokers import JobBroker


class MaintenanceProvider(Provider):
    scope = Scope.APP

    @provide
    def prune(self, engine: AsyncEngine, clock: Clock, settings: Settings) -> PruneFinishedJobs:
        keep = timedelta(days=settings.scheduler.prune_after_days)
        flows = SqlaFinishedFlows(engine)
        return PruneFinishedJobs(SqlaFinishedJobs(engine), clock, keep, flows=flows)

    @provide
    def prune_messages(
        self, engine: AsyncEngine, clock: Clock, settings: Settings
    ) -> PruneMessages:
        return PruneMessages(
            SqlaPublishedOutbox(engine),
            SqlaProcessedInbox(engine),
            clock,
            keep_outbox=timedelta(days=settings.scheduler.outbox_keep_days),
            keep_inbox=timedelta(days=settings.scheduler.inbox_keep_days),
            events=SqlaJobEventLog(engine),
            keep_events=timedelta(days=settings.events.keep_days),
        )

    @provide
    def outbox_lag(self, reads: OpsReadModel, clock: Clock, settings: Settings) -> CheckOutboxLag:
        threshold = timedelta(seconds=settings.scheduler.outbox_lag_warn_s)
        return CheckOutboxLag(reads, clock, threshold)

    @provide
    def dead_letters(self, broker: JobBroker, settings: Settings) -> ReportDeadLetters:
        return ReportDeadLetters(broker, settings.rabbit.dead_letter_queue)

    @provide
    def overview_samples(self, engine: AsyncEngine) -> OverviewSampleStore:
        return SqlaOverviewSamples(engine)

    @provide
    def sample_overview(self, samples: OverviewSampleStore, clock: Clock) -> SampleOverview:
        return SampleOverview(samples, clock)
