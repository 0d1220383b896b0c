"""Answers of the operator commands as a terminal shows them: one table of rows, or the
fields of one object, one a line; ``--json`` prints the answer itself instead."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

MAX_CELL = 60


def _cell(value: object) -> str:
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(value)
    text = " ".join(text.split())
    return text if len(text) <= MAX_CELL else text[: MAX_CELL - 1] + "…"


def table(rows: Sequence[Mapping[str, object]], columns: Sequence[str]) -> str:
    """The rows' `columns`, aligned under a header; "(none)" for no rows."""
    if not rows:
        return "(none)"
    cells = [[_cell(row.get(column)) for column in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = [[c.upper() for c in columns], *cells]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def fields(item: Mapping[str, object]) -> str:
    """One object's fields, one a line."""
    width = max(len(name) for name in item)
    return "\n".join(f"{name.ljust(width)}  {_cell(value)}" for name, value in item.items())
