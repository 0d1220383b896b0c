"""Fair dispatch: the jobs table is the queue of record, and a dispatcher releases the
jobs it holds into the broker in fair order between tenants, only as many as the
workers can take now.

- ``model``: the order (start-time fair queueing over a queue's tenants), pure.
- ``ports``: what a pass needs: the held jobs and the queue's lease (``DispatchStore``,
  in ``jobrail.store.dispatch``), the queue's ready count (``ReadyGauge``, the broker),
  and the publisher of the released jobs' messages (``Sender``).
- ``use_cases``: ``JobDispatcher``, the loop that runs in each process that runs jobs;
  one of them at a time holds a queue's lease and releases its jobs.

Off unless ``JOBRAIL_DISPATCH__ENABLED``; the design, with what it costs, is
docs/design/fair-dispatch.md.
"""

from jobrail.dispatch.ioc import DispatchProvider
from jobrail.dispatch.use_cases import JobDispatcher
from jobrail.modules import BackgroundLoop, LoopProcess, Module
from jobrail.settings import Settings


def dispatching_processes(settings: Settings) -> frozenset[LoopProcess]:
    """The processes that run a dispatcher (``JOBRAIL_DISPATCH__RUN_IN``)."""
    named = {"worker": LoopProcess.WORKER, "scheduler": LoopProcess.SCHEDULER}
    return frozenset({LoopProcess.EMBEDDED, *(named[name] for name in settings.dispatch.run_in)})


module = Module(
    name="dispatch",
    providers=[DispatchProvider()],
    loops=[
        BackgroundLoop(
            "dispatcher", JobDispatcher, JobDispatcher.run_forever, dispatching_processes
        )
    ],
)
