"""Finding a host's ``JobRail`` by its import path, ``pkg.module:attribute``."""

import importlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobrail.facade.rail import JobRail


APP_ENV = "JOBRAIL_APP"
"""The app's ``JobRail`` (``pkg.module:rail``): ``jobrail``'s commands read it when no
``--app`` is given, and ``jobrail worker`` leaves it for its worker processes."""


class AppLoadError(Exception):
    """The path names no importable module, or no ``JobRail`` in it."""


def load_rail(path: str) -> "JobRail":
    """The ``JobRail`` at `path` (``pkg.module:rail``): its module is imported, which
    declares its job types. As uvicorn does for its app, the current directory is put
    first on ``sys.path``: ``jobrail worker --app`` finds the host's package where it
    is run, without PYTHONPATH."""
    from jobrail.facade.rail import JobRail

    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise AppLoadError(f"--app {path!r}: give it as pkg.module:attribute")
    here = str(Path.cwd())
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AppLoadError(f"--app {path!r}: {module_name} cannot be imported: {exc}") from exc
    except Exception as exc:  # the app's own code failed at import: say which, in one line
        raise AppLoadError(
            f"--app {path!r}: importing {module_name} failed: {type(exc).__name__}: {exc}"
        ) from exc
    rail = getattr(module, attribute, None)
    if not isinstance(rail, JobRail):
        found = "missing" if rail is None else type(rail).__name__
        raise AppLoadError(f"--app {path!r}: {module_name}.{attribute} is not a JobRail ({found})")
    return rail
