"""The overview's pure parts: the short cache every tab shares, the charts' geometry and
the samples of a minute."""

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from jobrail.maintenance.sample import minute_samples, percentile
from jobrail.ops.cache import ShortCache
from jobrail.ops.charts import Series, bar_chart, line_chart, nice_top


class Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_the_cache_loads_once_for_callers_at_the_same_time_and_again_when_stale() -> None:
    ticks = Ticks()
    cache: ShortCache[int] = ShortCache(3.0, ticks)
    loads = 0

    async def load() -> int:
        nonlocal loads
        loads += 1
        await asyncio.sleep(0.01)
        return loads

    assert await asyncio.gather(*(cache.get(load) for _ in range(10))) == [1] * 10
    ticks.now += 2.9
    assert await cache.get(load) == 1
    ticks.now += 0.2
    assert await cache.get(load) == 2
    assert loads == 2


async def test_a_failed_load_is_not_kept_and_a_zero_window_keeps_nothing() -> None:
    cache: ShortCache[int] = ShortCache(3.0, Ticks())

    async def fail() -> int:
        raise RuntimeError("database away")

    async def one() -> int:
        return 1

    with pytest.raises(RuntimeError):
        await cache.get(fail)
    assert await cache.get(one) == 1

    uncached: ShortCache[int] = ShortCache(0, Ticks())
    calls = []

    async def counted() -> int:
        calls.append(1)
        return len(calls)

    assert [await uncached.get(counted) for _ in range(3)] == [1, 2, 3]


def test_the_scale_tops_at_one_two_or_five_times_a_power_of_ten() -> None:
    assert [nice_top(v) for v in (0, 0.3, 1, 3, 7, 10, 11, 250, 5001)] == [
        1,
        0.5,
        1,
        5,
        10,
        10,
        20,
        500,
        10000,
    ]


def test_bars_rise_with_their_values_and_lines_skip_minutes_not_sampled() -> None:
    minutes = [datetime(2026, 12, 6, 12, m, tzinfo=UTC) for m in range(4)]

    bars = bar_chart("c", "t", "jobs", minutes, [0, 5, 10, 0])
    lines = line_chart("l", "t", "s", minutes, [Series("p50", [1.0, None, 2.0, None])])

    assert bars.top == 10
    assert [b.height for b in bars.bars][1] * 2 == pytest.approx(bars.bars[2].height)
    assert bars.bars[2].y == pytest.approx(6)  # the top of the plot
    assert [p.minute for p in lines.lines[0].points] == ["12:00", "12:02"]
    assert lines.lines[0].path.count(",") == 2
    assert [(label, anchor) for _, label, anchor in bars.times] == [
        ("12:00", "start"),
        ("12:01", "middle"),
        ("12:03", "end"),
    ]


def test_a_minutes_samples_count_what_finished_and_the_percentiles_of_the_starts() -> None:
    minute = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
    delays = [float(n) for n in range(1, 101)]

    samples = minute_samples(minute, [("a", "succeeded", 4), ("a", "failed", 0)], delays)

    by = {(s.metric, s.label): s.value for s in samples}
    assert by == {
        ("finished", "a|succeeded"): 4,
        ("started", ""): 100,
        ("start_p50", ""): 50,
        ("start_p95", ""): 95,
    }
    assert percentile([], 0.5) == 0
    quiet = minute_samples(minute + timedelta(minutes=1), [], [])
    assert [(s.metric, s.value) for s in quiet] == [("started", 0)]
