"""After a commit, the messages leave without the committer waiting for the broker:
`DetachedDispatch` starts the fast path and returns; it waits only past its bound (the
broker is slow or stalled) and when the process stops (`drain`)."""

import asyncio
import contextvars
from collections.abc import Sequence

import pytest
from opentelemetry import trace

from jobrail.jobs.messages import JobMessage, Outgoing
from jobrail.outbox.committing import DetachedDispatch
from tests.fakes import make_job


class GatedDispatcher:
    """A fast path whose publishes complete only when the test opens the gate."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.started: list[Sequence[Outgoing]] = []
        self.done: list[Sequence[Outgoing]] = []

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        await self.dispatch_each([messages])

    async def dispatch_each(self, commits: Sequence[Sequence[Outgoing]]) -> None:
        self.started.extend(commits)
        await self.gate.wait()
        self.done.extend(commits)


def _messages() -> list[Outgoing]:
    return [JobMessage.of(make_job())]


async def test_the_committer_does_not_wait_for_the_broker() -> None:
    inner = GatedDispatcher()
    detached = DetachedDispatch(inner, max_in_flight=8)

    await asyncio.wait_for(detached.dispatch(_messages()), timeout=5)
    await asyncio.sleep(0)

    assert len(inner.started) == 1
    assert inner.done == []
    assert detached.in_flight == 1
    inner.gate.set()
    await detached.drain()
    assert len(inner.done) == 1
    assert detached.in_flight == 0


async def test_past_its_bound_a_dispatch_waits_for_the_broker() -> None:
    inner = GatedDispatcher()
    detached = DetachedDispatch(inner, max_in_flight=2)
    for _ in range(2):
        await detached.dispatch(_messages())

    third = asyncio.ensure_future(detached.dispatch(_messages()))
    await asyncio.sleep(0.01)

    assert not third.done()  # backpressure: it waits as an undetached dispatch would
    inner.gate.set()
    await asyncio.wait_for(third, timeout=5)
    await detached.drain()
    assert len(inner.done) == 3


async def test_drain_waits_for_every_dispatch_under_way() -> None:
    inner = GatedDispatcher()
    detached = DetachedDispatch(inner, max_in_flight=8)
    for _ in range(3):
        await detached.dispatch(_messages())

    drained = asyncio.ensure_future(detached.drain())
    await asyncio.sleep(0.01)
    assert not drained.done()

    inner.gate.set()
    await asyncio.wait_for(drained, timeout=5)
    assert len(inner.done) == 3


async def test_nothing_to_send_starts_nothing() -> None:
    inner = GatedDispatcher()
    detached = DetachedDispatch(inner, max_in_flight=8)

    await detached.dispatch([])

    assert detached.in_flight == 0
    assert inner.started == []


class ContextNoting:
    """A fast path that notes, per dispatch, its messages and the context it runs in."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[Sequence[Outgoing]], str | None, bool]] = []

    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        await self.dispatch_each([messages])

    async def dispatch_each(self, commits: Sequence[Sequence[Outgoing]]) -> None:
        span = trace.get_current_span().get_span_context()
        self.calls.append((list(commits), REQUEST.get(), span.trace_flags.sampled))


REQUEST: contextvars.ContextVar[str | None] = contextvars.ContextVar("request", default=None)


async def _commit(detached: DetachedDispatch, request: str, messages: list[Outgoing]) -> None:
    REQUEST.set(request)  # each commit runs in a task of its own, as requests do
    await detached.dispatch(messages)


async def test_the_commits_of_one_turn_leave_in_one_dispatch_outside_any_request() -> None:
    inner = ContextNoting()
    detached = DetachedDispatch(inner, max_in_flight=64)
    sent = [_messages() for _ in range(5)]

    await asyncio.gather(*(_commit(detached, f"r{i}", m) for i, m in enumerate(sent)))
    await detached.drain()

    ((commits, request, sampled),) = inner.calls
    assert commits == sent  # each commit's messages apart, to be published side by side
    assert request is None  # no request's context (its log context) rides along
    assert not sampled
    assert detached.in_flight == 0


async def test_a_commit_in_a_sampled_trace_publishes_in_its_own_context() -> None:
    inner = ContextNoting()
    detached = DetachedDispatch(inner, max_in_flight=64)
    sampled = trace.NonRecordingSpan(
        trace.SpanContext(
            0x1234, 0x5678, is_remote=False, trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED)
        )
    )

    async def traced_commit() -> None:
        with trace.use_span(sampled):
            await _commit(detached, "traced", _messages())

    await asyncio.gather(traced_commit(), _commit(detached, "plain", _messages()))
    await detached.drain()

    assert {(request, was_sampled) for _, request, was_sampled in inner.calls} == {
        (None, False),
        ("traced", True),
    }


class BrokenDispatcher:
    async def dispatch(self, messages: Sequence[Outgoing]) -> None:
        raise RuntimeError("a bug")

    async def dispatch_each(self, commits: Sequence[Sequence[Outgoing]]) -> None:
        raise RuntimeError("a bug")


async def test_a_dispatch_that_fails_after_the_committer_left_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    detached = DetachedDispatch(BrokenDispatcher(), max_in_flight=8)

    await detached.dispatch(_messages())
    await detached.drain()

    assert detached.in_flight == 0
    (record,) = [r for r in caplog.records if r.name == "jobrail.outbox"]
    assert record.levelname == "ERROR"
    assert "the relay will publish its rows" in record.getMessage()


async def test_dispatch_each_hands_over_each_commit_apart() -> None:
    inner = ContextNoting()
    detached = DetachedDispatch(inner, max_in_flight=64)
    commits = [_messages(), _messages()]

    await detached.dispatch_each(commits)
    await detached.drain()

    assert [calls for calls, _, _ in inner.calls] == [commits]
    assert detached.in_flight == 0
