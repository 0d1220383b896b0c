"""A module's background loops (``Module.loops``) are the runtime's to start and stop:
the bootstrap names none of them, and runs each in the processes it declares, from
their start to their stop. The platform's own relays are declared the same way."""

import asyncio
from pathlib import Path
from typing import Any

import pytest
from dishka import Provider, Scope
from taskiq import TaskiqEvents

from jobrail.cli.schema import migrate
from jobrail.maintenance import module as housekeeping
from jobrail.modules import JOB_PROCESSES, BackgroundLoop, LoopProcess, Module
from jobrail.outbox.relay import OutboxRelay
from jobrail.runtime.bootstrap import build_runtime, install_worker_lifecycle, serving
from jobrail.settings import Settings
from jobrail.webhooks import module as webhooks
from jobrail.webhooks.persistence import WebhookRelay


class Ticker:
    """A loop that records its start and its stop."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.stopped = False

    async def run(self, stop: asyncio.Event) -> None:
        self.started.set()
        try:
            await stop.wait()  # until the process stops
        finally:
            self.stopped = True


class ApiTicker(Ticker):
    """One declared for the stack mode's API processes only."""


def ticking_module() -> tuple[Module, Ticker, ApiTicker]:
    ticker, api_ticker = Ticker(), ApiTicker()
    provider = Provider(scope=Scope.APP)
    provider.provide(lambda: ticker, provides=Ticker)
    provider.provide(lambda: api_ticker, provides=ApiTicker)
    module = Module(
        name="ticking",
        providers=[provider],
        loops=[
            BackgroundLoop("ticker", Ticker, Ticker.run),
            BackgroundLoop(
                "api-ticker", ApiTicker, ApiTicker.run, processes=frozenset({LoopProcess.API})
            ),
        ],
    )
    return module, ticker, api_ticker


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """The embedded mode on a SQLite file, migrated (the relays read its tables)."""
    settings = Settings(
        mode="embedded",
        environment="test",
        modules=[],
        database={"url": f"sqlite+aiosqlite:///{tmp_path}/jobrail.db"},  # type: ignore[arg-type]
    )
    migrate(settings, [])
    return settings


def running_loops() -> list[str]:
    names = ("outbox-relay", "webhook-relay", "ticker", "api-ticker")
    return sorted(task.get_name() for task in asyncio.all_tasks() if task.get_name() in names)


def test_the_platform_declares_its_relays_on_its_modules() -> None:
    (outbox_relay,) = housekeeping.loops
    (webhook_relay,) = webhooks.loops

    assert (outbox_relay.name, outbox_relay.dependency) == ("outbox-relay", OutboxRelay)
    assert (webhook_relay.name, webhook_relay.dependency) == ("webhook-relay", WebhookRelay)
    # Where the jobs run, as before: the workers, and the embedded mode's one process.
    assert outbox_relay.processes == webhook_relay.processes == JOB_PROCESSES
    assert {LoopProcess.WORKER, LoopProcess.EMBEDDED} == JOB_PROCESSES


async def test_the_embedded_process_runs_the_modules_loops_while_it_serves(
    settings: Settings,
) -> None:
    module, ticker, api_ticker = ticking_module()
    runtime = build_runtime(settings, worker=False, modules=[module])

    async with serving(runtime):
        await asyncio.wait_for(ticker.started.wait(), 5)
        assert running_loops() == ["outbox-relay", "ticker", "webhook-relay"]
        assert not ticker.stopped
        assert not api_ticker.started.is_set()  # not an API process of the stack mode

    assert ticker.stopped
    assert running_loops() == []


async def test_a_worker_process_runs_the_modules_loops_from_its_start_to_its_stop(
    settings: Settings,
) -> None:
    module, ticker, api_ticker = ticking_module()
    runtime = build_runtime(settings, worker=True, modules=[module])
    handlers = runtime.broker.event_handlers
    before = {event: len(handlers[event]) for event in TaskiqEvents}
    install_worker_lifecycle(runtime)

    def added(event: TaskiqEvents) -> list[Any]:
        return handlers[event][before[event] :]

    assert running_loops() == []
    for start in added(TaskiqEvents.WORKER_STARTUP):
        await start(runtime.broker.state)
    await asyncio.wait_for(ticker.started.wait(), 5)
    assert running_loops() == ["outbox-relay", "ticker", "webhook-relay"]
    assert not api_ticker.started.is_set()

    for stop in added(TaskiqEvents.WORKER_SHUTDOWN):
        await stop(runtime.broker.state)
    assert ticker.stopped
    assert running_loops() == []


async def test_a_loop_runs_only_in_the_processes_it_declares(settings: Settings) -> None:
    module, ticker, api_ticker = ticking_module()
    runtime = build_runtime(settings, worker=False, modules=[module])

    await runtime.start_loops(LoopProcess.API)
    await asyncio.wait_for(api_ticker.started.wait(), 5)
    assert running_loops() == ["api-ticker"]
    assert not ticker.started.is_set()

    await runtime.stop_background()
    await runtime.container.close()
    assert api_ticker.stopped
    assert running_loops() == []


class Stubborn(Ticker):
    """A loop that never looks at its stop."""

    async def run(self, stop: asyncio.Event) -> None:
        self.started.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.stopped = True


async def test_a_loop_is_asked_to_stop_and_cancelled_only_if_it_does_not(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobrail.runtime import bootstrap

    monkeypatch.setattr(bootstrap, "LOOP_STOP_GRACE_S", 0.2)
    ticker, stubborn = Ticker(), Stubborn()
    provider = Provider(scope=Scope.APP)
    provider.provide(lambda: ticker, provides=Ticker)
    provider.provide(lambda: stubborn, provides=Stubborn)
    module = Module(
        name="mixed",
        providers=[provider],
        loops=[
            BackgroundLoop("ticker", Ticker, Ticker.run, processes=frozenset({LoopProcess.API})),
            BackgroundLoop(
                "stubborn", Stubborn, Stubborn.run, processes=frozenset({LoopProcess.API})
            ),
        ],
    )
    runtime = build_runtime(settings, worker=False, modules=[module])
    await runtime.start_loops(LoopProcess.API)
    await asyncio.wait_for(stubborn.started.wait(), 5)
    tasks = {task.get_name(): task for task in asyncio.all_tasks()}

    await runtime.stop_background()
    await runtime.container.close()

    assert ticker.stopped
    assert stubborn.stopped
    assert not tasks["ticker"].cancelled()  # it returned when asked
    assert tasks["stubborn"].cancelled()  # it did not, and was cancelled after the grace


async def test_the_relays_end_their_pass_and_return_when_asked_to_stop(
    settings: Settings,
) -> None:
    runtime = build_runtime(settings, worker=False, modules=[])
    stop = asyncio.Event()
    relays = [
        asyncio.create_task(
            OutboxRelay.run_forever(await runtime.container.get(OutboxRelay), stop)
        ),
        asyncio.create_task(
            WebhookRelay.run_forever(await runtime.container.get(WebhookRelay), stop)
        ),
    ]
    await asyncio.sleep(0.3)  # a pass each, then their pause
    stop.set()

    done, _ = await asyncio.wait(relays, timeout=5)
    await runtime.container.close()

    assert done == set(relays)
    assert all(not task.cancelled() and task.exception() is None for task in relays)
