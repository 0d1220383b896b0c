"""Every import of jobrail, and of the reference application, that the reference pages
are generated from, in this one module: modules inside jobrail move (``jobrail.runtime.app``
and ``jobrail.facade`` among them), and whoever moves one updates the import here. The
settings stay at ``jobrail.settings``; the command's parser is in ``jobrail.cli.parser``.
"""

import argparse
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from contexts.notifications.adapters.settings import NotificationsSettings
from contexts.sync.adapters.settings import SyncSettings
from jobrail import JobRail, __version__
from jobrail.cli.parser import _parser
from jobrail.facade.loading import APP_ENV
from jobrail.settings import ENV_PREFIX, Settings
from workers.app import MODULES

__all__ = [
    "APPLICATION_SETTINGS",
    "SETTINGS",
    "SETTINGS_PREFIX",
    "cli_parser",
    "openapi_document",
]

SETTINGS: type[BaseModel] = Settings
"""jobrail's settings: ``JOBRAIL_<SECTION>__<FIELD>``, each section a nested model."""
SETTINGS_PREFIX = ENV_PREFIX

APPLICATION_SETTINGS: tuple[type[BaseSettings], ...] = (SyncSettings, NotificationsSettings)
"""The reference application's own settings, each class with its ``env_prefix``."""


def cli_parser() -> argparse.ArgumentParser:
    """The parser of the ``jobrail`` command, as ``jobrail --help`` shows it."""
    return _parser(APP_ENV, __version__)


class _Defaults(Settings):
    """Settings from their defaults and the values given only, never the environment or a
    ``.env`` file, so that the page is the same wherever the site is built."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document of the reference application's API (``make run``: the
    embedded mode, with the demo), from an app that is built but never started: no
    database is opened, nothing listens."""
    database = Path("/nonexistent") / "jobrail.db"  # never opened: the routes are enough
    settings = _Defaults(
        mode="embedded",
        environment="development",
        database={"url": f"sqlite+aiosqlite:///{database}"},
    )
    rail = JobRail(settings, modules=MODULES, default_modules=["demo"])
    document: dict[str, Any] = rail.app().openapi()
    return document
