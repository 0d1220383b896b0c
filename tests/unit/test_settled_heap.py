"""jobrail's own processes settle their heap once started (jobrail.runtime.bootstrap.settle_heap):
start-up's objects frozen out of the cyclic collector, young collections less often."""

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from fastapi import FastAPI

from jobrail.cli import serving as cli
from jobrail.runtime.bootstrap import YOUNG_GC_THRESHOLD

SETTLE = """
import gc, json, weakref
from jobrail.runtime.bootstrap import settle_heap
class Node:
    pass
gc.disable()  # nothing collects the cycle below but settle_heap itself
before = gc.get_freeze_count()
garbage = Node()
garbage.me = garbage  # a cycle start-up left behind
alive = weakref.ref(garbage)
del garbage
settle_heap()
print(json.dumps({"before": before, "frozen": gc.get_freeze_count(),
                  "threshold": gc.get_threshold(), "cycle_left": alive() is not None}))
"""


def test_settling_freezes_what_start_up_made_and_collects_its_garbage_first() -> None:
    # In a process of its own: the test process's collector stays as it is.
    done = subprocess.run(
        [sys.executable, "-c", SETTLE], capture_output=True, text=True, check=True, timeout=60
    )
    found = json.loads(done.stdout)

    assert found["before"] == 0
    assert found["frozen"] > 10_000  # the modules, classes and functions imported
    assert found["threshold"][0] == YOUNG_GC_THRESHOLD
    assert not found["cycle_left"]  # collected before the freeze, not frozen with the rest


async def test_jobrail_api_settles_the_heap_once_the_lifespan_has_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[str] = []

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        events.append("started")
        yield
        events.append("stopped")

    monkeypatch.setattr("jobrail.runtime.bootstrap.settle_heap", lambda: events.append("settled"))
    app = FastAPI(lifespan=lifespan)
    cli._settle_heap_once_started(app)

    async with app.router.lifespan_context(app):
        assert events == ["started", "settled"]
    assert events == ["started", "settled", "stopped"]
