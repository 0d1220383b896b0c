"""The overview's charts as inline SVG, drawn on the server: the geometry of bars and
lines over a row of minutes, for a template to write out. No script draws them and no
inline style colours them (the console's CSP allows neither): classes do, in
``console.css``."""

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

WIDTH = 640
HEIGHT = 140
LEFT = 52  # room for the scale's labels
BOTTOM = 22  # room for the times
TOP = 6
SERIES_SHOWN = 8  # lines of one chart at most (its `s0`..`s7` classes)


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    values: Sequence[float | None]
    """One per minute; None where nothing was sampled."""


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    minute: str
    value: float


@dataclass(frozen=True, slots=True)
class Point:
    x: float
    y: float
    minute: str
    value: float


@dataclass(frozen=True, slots=True)
class Line:
    name: str
    css: str
    points: list[Point]

    @property
    def path(self) -> str:
        return " ".join(f"{p.x:.1f},{p.y:.1f}" for p in self.points)


@dataclass(frozen=True, slots=True)
class Chart:
    id: str
    title: str
    unit: str
    top: float
    """The value at the top of the scale."""
    bars: list[Bar] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    times: list[tuple[float, str, str]] = field(default_factory=list)
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    bottom: float = HEIGHT - BOTTOM
    """The y of the axis."""

    @property
    def empty(self) -> bool:
        return not any(b.value for b in self.bars) and not any(ln.points for ln in self.lines)


def nice_top(value: float) -> float:
    """The smallest of 1, 2 or 5 times a power of ten that is at least `value` (1 for 0)."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power + 1e-9:
            return step * power
    return 10 * power


def _label(minute: datetime) -> str:
    return minute.strftime("%H:%M")


def _frame(minutes: Sequence[datetime]) -> tuple[float, list[tuple[float, str, str]]]:
    """The width of a minute, and the times written under the axis (x, text, anchor):
    the first minute's, the middle one's and the last one's, inside the chart."""
    slot = (WIDTH - LEFT) / max(len(minutes), 1)
    if not minutes:
        return slot, []
    last = len(minutes) - 1
    times = [(LEFT + slot * 0.5, _label(minutes[0]), "start")]
    if last >= 2:
        middle = last // 2
        times.append((LEFT + slot * (middle + 0.5), _label(minutes[middle]), "middle"))
    if last >= 1:
        times.append((WIDTH - 1.0, _label(minutes[last]), "end"))
    return slot, times


def _y(value: float, top: float) -> float:
    return HEIGHT - BOTTOM - (value / top) * (HEIGHT - BOTTOM - TOP)


def bar_chart(
    chart_id: str, title: str, unit: str, minutes: Sequence[datetime], values: Sequence[float]
) -> Chart:
    """A bar for each minute."""
    slot, times = _frame(minutes)
    top = nice_top(max(values, default=0))
    bars = [
        Bar(
            x=LEFT + slot * i + slot * 0.1,
            y=_y(value, top),
            width=slot * 0.8,
            height=HEIGHT - BOTTOM - _y(value, top),
            minute=_label(minute),
            value=value,
        )
        for i, (minute, value) in enumerate(zip(minutes, values, strict=True))
    ]
    return Chart(chart_id, title, unit, top, bars=bars, times=times)


def line_chart(
    chart_id: str, title: str, unit: str, minutes: Sequence[datetime], series: Sequence[Series]
) -> Chart:
    """A line for each series (the first SERIES_SHOWN), through the minutes it has."""
    slot, times = _frame(minutes)
    shown = list(series)[:SERIES_SHOWN]
    top = nice_top(max((v for s in shown for v in s.values if v is not None), default=0))
    lines = [
        Line(
            name=s.name,
            css=f"s{n}",
            points=[
                Point(LEFT + slot * (i + 0.5), _y(value, top), _label(minute), value)
                for i, (minute, value) in enumerate(zip(minutes, s.values, strict=True))
                if value is not None
            ],
        )
        for n, s in enumerate(shown)
    ]
    return Chart(chart_id, title, unit, top, lines=lines, times=times)
