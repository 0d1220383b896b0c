"""Modules: how a bounded context plugs into the platform.

A module (``contexts.billing``, ``jobrail.demo``) is a ``Module``: its job types, its
HTTP routers, its dishka providers, (for the event catalog) the integration events it
lists, the periodic jobs it declares (run by ``jobrail scheduler``), the Alembic
chains of its tables (run by ``jobrail migrate`` after the platform's own; modules may
share one) and its background loops (``BackgroundLoop``: the outbox relay is the
housekeeping module's, the webhook relay the webhooks module's; the bootstrap starts
those of the loaded modules and names none). A process loads, besides the platform's
own housekeeping (``jobrail.maintenance``, always there):

- the installed modules named in ``JOBRAIL_MODULES``: entry points of the group
  ``jobrail.modules`` (jobrail's own: ``demo``), as pytest finds its plugins;
- the modules given to the app's ``JobRail(modules=[...])`` (``--app``), which is how
  this repository's reference application loads its contexts (``workers.app``).

``JOBRAIL_MODULES`` unset means the demo for jobrail's own processes run without an app
(a sandbox), but an app's ``JobRail`` its own default (``with_default_modules``): a host
app gets the demo's routes, and the demo tenant that goes with them, only if it asks.

The platform never imports a context itself.
"""

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, TypeVar

from dishka import Provider
from fastapi import APIRouter

from jobrail.events.catalog import EventSpec
from jobrail.jobs.registry import JobSpec
from jobrail.scheduler.schedule import Schedule
from jobrail.settings import Settings
from jobrail.store.schema import MigrationChain

T = TypeVar("T")


class LoopProcess(Enum):
    """The processes a background loop may run in."""

    WORKER = "worker"  # each process of `jobrail worker` (the stack mode)
    # The embedded mode's one process (`jobrail run`, `jobrail api` or a host's app in
    # that mode), which serves the API and runs the jobs itself.
    EMBEDDED = "embedded"
    API = "api"  # an API process of the stack mode (`jobrail api`, a host's app)
    SCHEDULER = "scheduler"  # `jobrail scheduler` (the stack mode)


# The processes that run jobs: where the relays run.
JOB_PROCESSES = frozenset({LoopProcess.WORKER, LoopProcess.EMBEDDED})


@dataclass(frozen=True, slots=True)
class BackgroundLoop(Generic[T]):
    """A loop a module runs in the background of each of its `processes`: once the
    process has started, ``run(await container.get(dependency), stop)`` in a task named
    `name`. When the process stops (before its broker stops and its container closes)
    `stop` is set: the loop ends its pass and returns; one still running a moment later
    (``jobrail.runtime.bootstrap.LOOP_STOP_GRACE_S``) is cancelled. The loops start in
    the order of the modules, then of their ``loops``. `processes` may be read from the
    process's settings (a function of them)."""

    name: str
    dependency: type[T]
    run: Callable[[T, asyncio.Event], Coroutine[Any, Any, Any]]
    processes: frozenset[LoopProcess] | Callable[[Settings], frozenset[LoopProcess]] = JOB_PROCESSES

    def runs_in(self, process: LoopProcess, settings: Settings) -> bool:
        processes = self.processes
        if not isinstance(processes, frozenset):
            processes = processes(settings)
        return process in processes


@dataclass(frozen=True, slots=True)
class Module:
    name: str
    jobs: Sequence[JobSpec] = ()
    routers: Sequence[APIRouter] = ()
    providers: Sequence[Provider] = field(default_factory=tuple)
    events: Sequence[EventSpec] = ()
    schedules: Sequence[Schedule] = ()
    migrations: Sequence[MigrationChain] = ()
    # Routers that depend on the app's settings (served in some modes only): a module is
    # imported once per process, while each app is built from its own Settings.
    router_factories: Sequence[Callable[[Settings], Sequence[APIRouter]]] = ()
    loops: Sequence[BackgroundLoop[Any]] = ()

    def routers_for(self, settings: Settings) -> list[APIRouter]:
        """The routers an app built from `settings` serves. A factory may raise
        SettingsError for settings it refuses."""
        return [*self.routers, *(r for make in self.router_factories for r in make(settings))]


"""The entry-point group an installed distribution names its modules in."""
