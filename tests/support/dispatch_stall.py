"""A worker whose dispatcher stalls one release on request, between its confirmed
publish and its commit: how the dispatcher kill test (tests/faults/test_dispatcher_kills.py)
SIGKILLs a dispatcher mid-release every time, not when it happens to be there, and lets
a release commit only after its messages have reached a worker.

Workers load it with ``JOBRAIL_APP=tests.support.dispatch_stall:rail`` (the reference
application and the tests' job types, as ``tests.support.apps:reference_and_test_jobs``)
and ``JOBRAIL_TEST_STALL_DIR`` set to a directory of the test's. Its module provides the
process's dispatcher as jobrail.dispatch.ioc does, with a sender that, once its messages
are confirmed, looks for the file ``request`` in that directory. A sender that removes it
(one at a time can: the lease lets one process release a queue at a time) appends a line
``<pid> <job id> ...`` (the jobs of its messages) to ``stalled`` and waits, its pass's
transaction open, until the test kills it or makes the file ``resume`` (which it removes,
and commits). Without a request, a release goes on at once.
"""

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path

from dishka import Provider, Scope, provide
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail import JobRail, Module
from jobrail.dispatch.ioc import job_dispatcher
from jobrail.dispatch.ports import Sender
from jobrail.dispatch.use_cases import JobDispatcher
from jobrail.jobs.intake import JobCatalog
from jobrail.jobs.messages import JobMessage
from jobrail.kernel.clock import Clock
from jobrail.settings import Settings
from jobrail.transport.brokers import JobBroker
from jobrail.transport.codec import MessagePublisher
from tests.support import jobs
from tests.support.lines import append_line
from workers.app import MODULES as REFERENCE

DIR_ENV = "JOBRAIL_TEST_STALL_DIR"
# Longer than any test waits to kill or resume a stalled dispatcher.
STALL_S = 600
LOOK_S = 0.01


def request(directory: Path) -> None:
    """Ask the next release, whichever process makes it, to stall."""
    (directory / "request").touch()


def stalled(directory: Path) -> list[tuple[int, list[str]]]:
    """(pid, job ids) of each release stalled so far, in order."""
    try:
        lines = (directory / "stalled").read_text().splitlines()
    except FileNotFoundError:
        return []
    return [(int(pid), ids) for pid, *ids in (line.split() for line in lines if line.strip())]


def resume(directory: Path) -> None:
    """Let the stalled release commit."""
    (directory / "resume").touch()


class StallingSender:
    """`sender`, and then the stall on request (see the module's docstring)."""

    def __init__(self, sender: Sender, directory: Path) -> None:
        self._sender = sender
        self._directory = directory

    async def send(self, messages: Sequence[JobMessage]) -> Sequence[BaseException | None]:
        results = await self._sender.send(messages)
        if any(error is not None for error in results):
            return results
        try:
            (self._directory / "request").unlink()
        except FileNotFoundError:
            return results
        line = " ".join([str(os.getpid()), *(str(message.job_id) for message in messages)])
        append_line(self._directory / "stalled", f"{line}\n")
        await self._until_resumed()
        return results

    async def _until_resumed(self) -> None:
        deadline = asyncio.get_running_loop().time() + STALL_S
        while asyncio.get_running_loop().time() < deadline:
            try:
                (self._directory / "resume").unlink()
            except FileNotFoundError:
                await asyncio.sleep(LOOK_S)
            else:
                return


class StallingDispatchProvider(Provider):
    """jobrail.dispatch.ioc's dispatcher, with a StallingSender; the later provider, it
    takes that one's place."""

    scope = Scope.APP

    @provide
    def dispatcher(
        self,
        engine: AsyncEngine,
        broker: JobBroker,
        catalog: JobCatalog,
        clock: Clock,
        settings: Settings,
    ) -> JobDispatcher:
        sender = StallingSender(MessagePublisher(broker), Path(os.environ[DIR_ENV]))
        return job_dispatcher(engine, broker, catalog, clock, settings, sender)


module = Module(name="dispatch_stall", providers=[StallingDispatchProvider()])
rail = JobRail(modules=[*REFERENCE, jobs.module, module], default_modules=["demo"])
"""The reference application and the tests' job types, with the stalling dispatcher."""
