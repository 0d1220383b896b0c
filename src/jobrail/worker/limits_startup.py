"""The Taskiq middleware of the limits: it prepares them when a worker starts.

It deliberately does not gate jobs. A Taskiq ``pre_execute`` hook that raises
leaves the RabbitMQ message unacknowledged, and one that returns cannot skip the
task; so the gate runs inside task execution, in the job runner's own middleware chain
(``jobrail.worker.attempt``, the limits and lock in ``jobrail.worker.admission``), where a
denial becomes a deferral. Here the worker loads the Lua scripts before its first job,
so that no job pays for loading them.
"""

import logging

from dishka import AsyncContainer
from taskiq import TaskiqMiddleware

from jobrail.limits.model import LimitsBackend, LimitsUnavailableError
from jobrail.limits.redis import RedisLimits

log = logging.getLogger("jobrail.limits")


class LimitsMiddleware(TaskiqMiddleware):
    def __init__(self, container: AsyncContainer) -> None:
        super().__init__()
        self._container = container

    async def startup(self) -> None:
        if not self.broker.is_worker_process:
            return
        backend = await self._container.get(LimitsBackend)
        if not isinstance(backend, RedisLimits):
            return
        try:
            await backend.load_scripts()
        except LimitsUnavailableError as exc:
            log.warning("Redis unreachable at start-up (%s); limited jobs wait for it", exc)
