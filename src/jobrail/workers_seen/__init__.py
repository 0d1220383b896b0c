"""Live workers: every process that runs jobs (each ``jobrail worker`` process, and the
embedded runtime) beats every ``JOBRAIL_WORKER__BEAT_INTERVAL_S`` (5 s): one upsert of
its row in ``workers`` with its host, pid, version, queues, concurrency and the jobs it
runs now. One that misses three beats shows as gone; one that stops cleanly marks itself
stopped. Read through ``GET /admin/workers``, ``jobrail workers`` and the
``jobrail_workers{state}`` gauge. Rows gone or stopped for an hour are deleted by the
``prune-workers`` schedule (every 10 minutes, a job like housekeeping's).

- ``model``: a worker's beat and the rule of its state, pure.
- ``ports``: where beats are written (``WorkerBook``) and what runs now.
- ``use_cases``: the ``Heartbeat`` loop, ``ListWorkers``, ``PruneQuietWorkers``.
"""

from jobrail.modules import BackgroundLoop, Module
from jobrail.scheduler import Schedule
from jobrail.workers_seen.ioc import WorkersSeenProvider
from jobrail.workers_seen.jobs import prune_workers
from jobrail.workers_seen.use_cases import Heartbeat

module = Module(
    name="workers_seen",
    jobs=[prune_workers],
    providers=[WorkersSeenProvider()],
    schedules=[Schedule("prune-workers", cron="*/10 * * * *", job_type=prune_workers.name)],
    loops=[BackgroundLoop("worker-beat", Heartbeat, Heartbeat.run_forever)],
)
