"""A job's priority, and how fair dispatch places a held job in its tenant's line.

Priority is a head start in time, not a separate line: a job of priority P is placed as
if it had been due ``offsets[P]`` earlier (its ``rank_at``). A higher one overtakes the
lower ones due at most the difference of their offsets before it, and no further; so a
job waits behind higher ones for that difference at most, however many keep coming
(its priority rises with its age, and nothing rewrites a row to make it so). Honoured
within a tenant's share under fair dispatch (jobrail.dispatch); without it, jobs start
in the order they were published."""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import IntEnum
from typing import Protocol

from jobrail.kernel.errors import InvalidInputError


class Priority(IntEnum):
    LOW = 0
    NORMAL = 1
    HIGH = 2
    URGENT = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def of(cls, value: "Priority | str") -> "Priority":
        """A priority given by its name (``"high"``), or as itself."""
        if isinstance(value, Priority):
            return value
        try:
            return cls[str(value).upper()]
        except KeyError:
            names = ", ".join(p.label for p in cls)
            raise InvalidInputError(
                f"priority {value!r} is none of {names}",
                details=[{"loc": ["priority"], "msg": f"one of {names}", "type": "enum"}],
            ) from None


PRIORITY_NAMES = tuple(p.label for p in Priority)

DEFAULT_OFFSETS: Mapping[Priority, timedelta] = {
    Priority.LOW: timedelta(0),
    Priority.NORMAL: timedelta(seconds=30),
    Priority.HIGH: timedelta(seconds=120),
    Priority.URGENT: timedelta(seconds=600),
}


class DispatchLike(Protocol):
    """The dispatch settings, as far as the line is concerned (jobrail.settings)."""

    @property
    def enabled(self) -> bool: ...

    @property
    def priority_offsets_s(self) -> Mapping[str, float]: ...


@dataclass(frozen=True, slots=True)
class LineRules:
    """How fair dispatch places a held job in its tenant's line: by when it is due,
    less its priority's head start (`offsets`)."""

    offsets: Mapping[Priority, timedelta]

    @classmethod
    def of(cls, dispatch: "DispatchLike") -> "LineRules | None":
        """The rules of a process's dispatch settings; None when fair dispatch is off."""
        if not dispatch.enabled:
            return None
        offsets = dispatch.priority_offsets_s
        return cls({p: timedelta(seconds=offsets[p.label]) for p in Priority})

    def rank(self, due: datetime, priority: Priority) -> datetime:
        return due - self.offsets[priority]
