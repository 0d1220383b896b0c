"""`jobrail run` (the embedded mode) fires the built-in schedules itself: here the DLQ
report and the message pruning, set to fire every second, run as jobs of the `_system`
tenant; and schedules that do not fit stop it at once with the reason."""

import json
import os
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tests.support.processes import BIN, Process, start_embedded

DEMO = {"Authorization": "Bearer demo-key"}


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[tuple[str, Process]]:
    schedules = {"dlq-report": {"cron": "* * * * * *"}, "prune-messages": {"cron": "* * * * * *"}}
    base, server = start_embedded(tmp_path, {"JOBRAIL_SCHEDULER__SCHEDULES": json.dumps(schedules)})
    yield base, server
    server.stop()


def _succeeded(base: str, job_type: str) -> int:
    overview = httpx.get(f"{base}/admin/overview", headers=DEMO, timeout=5).json()
    return sum(
        count["count"]
        for count in overview["counts"]
        if (count["type"], count["status"]) == (job_type, "succeeded")
    )


def _fired_after(server: Process, moment: datetime) -> list[str]:
    """The dlq-report periods fired that started after `moment` (not caught up)."""
    return [
        r["key"]
        for r in server.log_records()
        if r.get("event") == "schedule.fired"
        and r["schedule"] == "dlq-report"
        and datetime.fromisoformat(r["key"].split(":", 1)[1].replace("Z", "+00:00")) > moment
    ]


def test_jobrail_run_fires_the_built_in_schedules_in_process(
    embedded: tuple[str, Process],
) -> None:
    base, server = embedded
    serving_since = datetime.now(UTC)

    deadline = time.monotonic() + 60
    while len(_fired_after(server, serving_since)) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    fired = _fired_after(server, serving_since)
    kinds = ("maintenance.report_dead_letters", "maintenance.prune_messages")
    while min(_succeeded(base, k) for k in kinds) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)

    assert len(fired) >= 2, server.output()[-3000:]
    # ... and a worker in the same process ran them, the pruning included.
    assert [_succeeded(base, k) >= 2 for k in kinds] == [True, True], server.output()[-3000:]
    assert any(r.get("event") == "leader.acquired" for r in server.log_records())


def test_jobrail_run_refuses_schedules_that_do_not_fit_with_the_reason(tmp_path: Path) -> None:
    run = subprocess.run(
        [str(BIN / "jobrail"), "run"],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("JOBRAIL_")},
            "JOBRAIL_MODE": "embedded",
            "JOBRAIL_DATABASE__URL": f"sqlite+aiosqlite:///{tmp_path}/run.db",
            "JOBRAIL_SCHEDULER__SCHEDULES": json.dumps({"dlq-report": {"cron": "every day"}}),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert run.returncode == 2, run.stderr
    assert "jobrail: schedule dlq-report: cron 'every day'" in run.stderr
    assert "Traceback" not in run.stderr + run.stdout
