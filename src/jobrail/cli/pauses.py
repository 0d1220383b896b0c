"""``jobrail pause``, ``jobrail resume`` and ``jobrail pauses``: the admin API's pauses
(jobrail.dispatch.pauses) from the command line, on the database of the settings."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported inside the command, as jobrail.cli.command says why
    from jobrail.modules import Module
    from jobrail.settings import Settings


async def _pauses_command(
    settings: Settings, args: argparse.Namespace, modules: Sequence[Module]
) -> dict[str, object]:
    from jobrail.dispatch.pauses import Pauses
    from jobrail.kernel.clock import SystemClock
    from jobrail.kernel.errors import DomainError
    from jobrail.runtime.bootstrap import job_catalog
    from jobrail.store.engine import close_engine, create_engine
    from jobrail.store.pauses import SqlaPauses

    _, registry, _ = job_catalog(settings, modules)
    engine = create_engine(settings.database)
    pauses = Pauses(SqlaPauses(engine), SystemClock(), settings.rabbit.queues, registry)
    try:
        if args.command == "pause":
            paused = await pauses.pause(args.scope, args.value)
            return {
                "scope": paused.pause.scope,
                "value": paused.pause.value,
                "paused_at": paused.pause.paused_at.isoformat(),
                "recalled": paused.recalled,
            }
        if args.command == "resume":
            await pauses.resume(args.scope, args.value)
            return {"scope": args.scope, "value": args.value, "resumed": True}
        return {
            "pauses": [
                {"scope": p.scope, "value": p.value, "paused_at": p.paused_at.isoformat()}
                for p in await pauses.list()
            ]
        }
    except DomainError as exc:
        print(f"jobrail: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        await close_engine(engine)
