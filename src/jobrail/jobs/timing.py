"""The options of an enqueue, checked the same way from HTTP and from Python: when the
job may start (``run_at``, or ``delay`` from now), by when it must have started
(``deadline``) and its ``unique_key``, resolved against the caller's clock into the
fields of ``EnqueueJobCommand``."""

import math
import unicodedata
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from jobrail.jobs.intake import Debounce, EnqueueJobCommand, ValidatedPayload
from jobrail.jobs.priority import Priority
from jobrail.kernel.errors import InvalidInputError
from jobrail.kernel.ids import TenantId

MAX_DELAY = timedelta(days=366)
"""The furthest ahead a job may be put off, by `delay` or by `run_at`."""

MAX_UNIQUE_KEY_LENGTH = 255  # what the jobs table holds, as an Idempotency-Key

# A time a job can be due at: converting a time near year 1 or 9999 to UTC, or adding
# to it, overflows (as a list cursor's time would: jobrail.jobs.schemas).
_YEARS = range(2000, 9000)


class CommandOptions(NamedTuple):
    """The options as ``EnqueueJobCommand`` takes them (UTC times)."""

    run_after: datetime | None
    deadline: datetime | None
    unique_key: str | None
    debounce: Debounce | None = None
    priority: Priority | None = None

    def command(
        self,
        *,
        tenant_id: TenantId,
        type: str,
        payload: Mapping[str, Any] | ValidatedPayload,
        idempotency_key: str | None = None,
        entity_id: str | None = None,
    ) -> EnqueueJobCommand:
        """The command to enqueue a job of `type` with these options."""
        return EnqueueJobCommand(
            tenant_id=tenant_id,
            type=type,
            payload=payload,
            idempotency_key=idempotency_key,
            entity_id=entity_id,
            run_after=self.run_after,
            deadline=self.deadline,
            unique_key=self.unique_key,
            debounce=self.debounce,
            priority=self.priority,
        )


NO_OPTIONS = CommandOptions(None, None, None)


def resolve_options(
    now: datetime,
    *,
    run_at: datetime | None = None,
    delay: float | timedelta | None = None,
    deadline: datetime | None = None,
    unique_key: str | None = None,
    debounce_key: str | None = None,
    debounce_s: float | None = None,
    priority: Priority | str | None = None,
) -> CommandOptions:
    """The command's fields for these options at `now`; InvalidInputError naming each
    one that is wrong (its details' ``loc`` is the option's name).

    - `run_at` and `deadline` are timezone-aware times; `run_at` may be past (the job is
      due at once), but not more than a year ahead (``MAX_DELAY``).
    - `delay` is seconds (or a timedelta) from `now`, from 0 to ``MAX_DELAY``; it and
      `run_at` are two ways to say one thing: one or neither.
    - `deadline` is after the job may start (`run_at`, `now` + `delay`, or `now`
      if that is later): no attempt starts at or after it.
    - `unique_key` is 1 to 255 characters, not blank, without control characters.
    - `debounce_key` and `debounce_s` (its window, more than 0 and at most a day) go
      together, and with neither a start time nor a unique key (``Debounce``): the job
      starts when the window closes.
    - `priority` is one of low, normal, high, urgent (jobrail.jobs.priority).
    """
    problems: list[dict[str, Any]] = []
    run_at = _utc("run_at", run_at, problems)
    deadline = _utc("deadline", deadline, problems)
    seconds = _seconds(delay, problems)
    if run_at is not None and seconds is not None:
        problems.append(
            _problem("delay", "exclusive", "run_at and delay cannot both be given: give one")
        )
    elif run_at is not None and run_at > now + MAX_DELAY:
        problems.append(
            _problem("run_at", "too_late", f"run_at is more than {MAX_DELAY.days} days away")
        )
    run_after = run_at if seconds is None else now + timedelta(seconds=seconds)
    start = now if run_after is None else max(run_after, now)  # a past run_at: now
    if deadline is not None and not problems and deadline <= start:
        problems.append(
            _problem(
                "deadline",
                "not_after_start",
                f"deadline {deadline.isoformat()} is not after the job may start "
                f"({start.isoformat()})",
            )
        )
    _check_unique_key(unique_key, problems)
    level = None
    if priority is not None:
        try:
            level = Priority.of(priority)
        except InvalidInputError as refused:
            problems.extend(refused.details)
    debounce = _debounce(debounce_key, debounce_s, run_after is not None or unique_key, problems)
    if debounce is not None and deadline is not None and not problems:
        closes = now + timedelta(seconds=debounce.window_s)
        if deadline <= closes:
            problems.append(
                _problem(
                    "deadline",
                    "not_after_start",
                    f"deadline {deadline.isoformat()} is not after the debounce window "
                    f"closes ({closes.isoformat()})",
                )
            )
    if problems:
        raise InvalidInputError("; ".join(problem["msg"] for problem in problems), details=problems)
    return CommandOptions(run_after, deadline, unique_key, debounce, level)


def _debounce(
    key: str | None, window_s: float | None, clashes: object, problems: list[dict[str, Any]]
) -> Debounce | None:
    if key is None and window_s is None:
        return None
    if key is None or window_s is None:
        missing = "debounce_key" if key is None else "debounce_s"
        problems.append(
            _problem(missing, "missing", "debounce_key and debounce_s go together: give both")
        )
        return None
    if clashes:
        problems.append(
            _problem(
                "debounce_key",
                "exclusive",
                "debounce cannot be combined with run_at, delay or unique_key",
            )
        )
        return None
    try:
        return Debounce(key=key, window_s=window_s)
    except InvalidInputError as refused:
        problems.extend(refused.details)
        return None


def _problem(option: str, kind: str, message: str) -> dict[str, Any]:
    return {"loc": [option], "msg": message, "type": kind}


def _utc(option: str, value: datetime | None, problems: list[dict[str, Any]]) -> datetime | None:
    if value is None:
        return None
    if value.tzinfo is None or value.utcoffset() is None:
        problems.append(
            _problem(
                option,
                "timezone_aware",
                f"{option} must be timezone-aware (such as 2030-01-01T09:00:00Z); "
                "a time without a zone is ambiguous",
            )
        )
        return None
    try:
        utc = value.astimezone(UTC)
    except OverflowError:
        utc = None
    if utc is None or utc.year not in _YEARS:
        problems.append(
            _problem(
                option,
                "out_of_range",
                f"{option} must fall between the years {_YEARS.start} and {_YEARS.stop}",
            )
        )
        return None
    return utc


def _seconds(delay: float | timedelta | None, problems: list[dict[str, Any]]) -> float | None:
    if delay is None:
        return None
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, int | float) and not isinstance(delay, bool):
        seconds = float(delay)
    else:
        problems.append(_problem("delay", "float_type", "delay must be seconds or a timedelta"))
        return None
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_DELAY.total_seconds():
        problems.append(
            _problem(
                "delay",
                "out_of_range",
                f"delay must be from 0 to {MAX_DELAY.total_seconds():.0f} seconds "
                f"({MAX_DELAY.days} days)",
            )
        )
        return None
    return seconds


def _check_unique_key(key: str | None, problems: list[dict[str, Any]]) -> None:
    if key is None:
        return
    if not key.strip():
        problems.append(_problem("unique_key", "string_too_short", "unique_key is blank"))
    elif len(key) > MAX_UNIQUE_KEY_LENGTH:
        problems.append(
            _problem(
                "unique_key",
                "string_too_long",
                f"unique_key is longer than {MAX_UNIQUE_KEY_LENGTH} characters",
            )
        )
    elif any(unicodedata.category(char) == "Cc" for char in key):
        problems.append(
            _problem("unique_key", "control_characters", "unique_key has control characters")
        )
