"""Platform housekeeping as scheduled jobs: prune finished jobs, prune the outbox and
inbox rows no one needs any more, watch the outbox lag, report the dead-letter queue,
sample the console's overview each minute (``jobrail.maintenance.sampling``); and the
outbox relay, the loop that publishes what the fast path missed and sweeps the
expired leases, in each process that runs jobs (see ``jobrail.outbox.relay``).

Each runs on a worker as a job of the ``_system`` tenant, enqueued by ``jobrail
scheduler`` once per period (in the embedded mode, by ``jobrail run`` itself).
Change a schedule with ``JOBRAIL_SCHEDULER__SCHEDULES``
(``{"prune-jobs": {"cron": "0 4 * * *"}}``) or switch it off (``{"enabled": false}``).
"""

from jobrail.maintenance.ioc import MaintenanceProvider
from jobrail.maintenance.jobs import (
    check_outbox_lag,
    prune_jobs,
    prune_messages,
    report_dead_letters,
    sample_overview,
)
from jobrail.modules import BackgroundLoop, Module
from jobrail.outbox.relay import OutboxRelay
from jobrail.scheduler import Schedule

module = Module(
    name="maintenance",
    jobs=[prune_jobs, prune_messages, check_outbox_lag, report_dead_letters, sample_overview],
    providers=[MaintenanceProvider()],
    schedules=[
        Schedule("prune-jobs", cron="0 3 * * *", job_type=prune_jobs.name),
        Schedule("prune-messages", cron="30 3 * * *", job_type=prune_messages.name),
        # These two look at the present: after a start or an outage, one run will do.
        Schedule("outbox-lag", "* * * * *", check_outbox_lag.name, catch_up=False),
        Schedule("dlq-report", cron="*/5 * * * *", job_type=report_dead_letters.name),
        Schedule("overview-samples", "* * * * *", sample_overview.name, catch_up=False),
    ],
    # The outbox has no module of its own: this one is always loaded, and keeps the
    # outbox's rows (prune-messages, outbox-lag) already.
    loops=[BackgroundLoop("outbox-relay", OutboxRelay, OutboxRelay.run_forever)],
)
