"""Modules: how a bounded context plugs into the platform.

A module (``contexts.billing``, ``jobrail.demo``) exposes a ``module`` attribute:
its job types, its HTTP routers, its dishka providers, (for the event catalog)
the integration events it lists, the periodic jobs it declares (run by
``jobrail scheduler``) and the Alembic chains of its tables (run by ``jobrail migrate``
after the platform's own; modules may share one). The platform loads the
modules named in ``JOBRAIL_MODULES``, so it never imports a context itself.
"""

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dishka import Provider
from fastapi import APIRouter

from jobrail.jobs.events import EventSpec
from jobrail.jobs.registry import JobSpec
from jobrail.persistence.schema import MigrationChain
from jobrail.scheduling.schedule import Schedule
from jobrail.settings import Settings


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

    def routers_for(self, settings: Settings) -> list[APIRouter]:
        """The routers an app built from `settings` serves. A factory may raise
        SettingsError for settings it refuses."""
        return [*self.routers, *(r for make in self.router_factories for r in make(settings))]


class ModuleLoadError(Exception):
    pass


def load_modules(paths: Sequence[str]) -> list[Module]:
    modules = []
    for path in paths:
        try:
            imported: Any = importlib.import_module(path)
        except ImportError as exc:
            raise ModuleLoadError(f"module {path!r} cannot be imported: {exc}") from exc
        module = getattr(imported, "module", None)
        if not isinstance(module, Module):
            raise ModuleLoadError(f"{path} has no `module = Module(...)` attribute")
        modules.append(module)
    return modules
