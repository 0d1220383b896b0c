"""Loading the modules a process runs with: those ``JOBRAIL_MODULES`` names (installed
entry points of the group ``jobrail.modules``), after the platform's own housekeeping,
dispatch and webhooks, which are always there (see ``jobrail.modules`` for what a module
is)."""

from collections.abc import Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from jobrail.modules import Module
from jobrail.settings import Settings

ENTRY_POINTS = "jobrail.modules"  # the entry points' group


class ModuleLoadError(Exception):
    pass


def with_default_modules(settings: Settings, names: Sequence[str]) -> Settings:
    """`settings` whose installed modules are `names` where ``JOBRAIL_MODULES`` was not
    given: an app's own default in place of jobrail's sandbox default (``SANDBOX_MODULES``).
    Production loads only the modules it names (see Settings)."""
    if "modules" in settings.model_fields_set or settings.environment == "production":
        return settings
    return settings.model_copy(update={"modules": list(names)})


def installed_modules() -> dict[str, EntryPoint]:
    return {point.name: point for point in entry_points(group=ENTRY_POINTS)}


def load_modules(names: Sequence[str]) -> list[Module]:
    """The platform's housekeeping, dispatch, webhooks and live workers, then the installed modules
    `names` names."""
    from jobrail.dispatch import module as dispatch
    from jobrail.maintenance import module as housekeeping
    from jobrail.webhooks import module as webhooks
    from jobrail.workers_seen import module as workers_seen

    installed = installed_modules()
    modules = [housekeeping, dispatch, webhooks, workers_seen]
    for name in names:
        point = installed.get(name)
        if point is None:
            known = ", ".join(sorted(installed)) or "none"
            hint = (
                " (an import path: give the Module to JobRail(modules=[...]) and run with "
                "--app, or register it as an entry point)"
                if "." in name or ":" in name
                else ""
            )
            raise ModuleLoadError(
                f"JOBRAIL_MODULES names {name!r}, which is no installed module{hint}; "
                f"installed: {known}"
            )
        try:
            module: Any = point.load()
        except ImportError as exc:
            raise ModuleLoadError(
                f"module {name!r} ({point.value}) cannot be imported: {exc}"
            ) from exc
        except Exception as exc:  # the module's own code failed at import
            raise ModuleLoadError(
                f"module {name!r} ({point.value}): importing it failed: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(module, Module):
            raise ModuleLoadError(f"module {name!r}: {point.value} is not a Module")
        modules.append(module)
    return modules
