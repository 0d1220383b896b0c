"""Periodic jobs: declared as data by modules, fired by ``jobrail scheduler``.

Why not Taskiq's scheduler (``taskiq scheduler`` with a ``LabelScheduleSource``)?
It sends each task straight to the broker with ``kiq``: no jobs row, no outbox, no
idempotency key, so a job it sends is invisible to ``GET /jobs``, lost when RabbitMQ
is down and sent twice when two schedulers run. Its cron has minute resolution and no
notion of a period to catch up, and it expects exactly one scheduler process.
jobrail's scheduler is a thin loop instead:

- ``schedule``: what a module declares (name, cron, timezone, job type, payload), and
  the idempotency key of each period;
- ``cron``: the calendar arithmetic (croniter), seconds included;
- ``leadership``: a renewable lock in the limits backend (Redis) so one process fires;
- ``scheduler``: the loop that enqueues each due period through ``EnqueueJob``;
- ``process``: ``jobrail scheduler``, built like the API and the workers.
"""

from jobrail.scheduler.schedule import SYSTEM_TENANT, Schedule

__all__ = ["SYSTEM_TENANT", "Schedule"]
