"""What the end of an attempt means: the error classification and the retry decision.

`classify` turns what a handler raised into a `Verdict`, and `retry_limit` says how
many attempts that kind of failure may use; the runner applies the verdict to the job
(``JobRunner._conclude``). Between attempts a job waits its type's retry policy
(``jobrail.jobs.retry``: exponential backoff with full jitter).

| raised                                         | verdict                                   |
|------------------------------------------------|-------------------------------------------|
| ``JobCancelledError`` (a cancel checkpoint)    | cancelled                                  |
| ``LeaseLostError``, unconfirmed and on time    | give the attempt back (the database stalled)|
| ``PermanentError`` (and a result too large)    | failed at once, dead-lettered              |
| ``ThrottledError`` (someone else's 429)        | wait its retry-after, no attempt spent     |
| ``TransientError``, a store/broker/limits outage, a timeout | retry, up to max attempts     |
| anything else                                  | retry, up to ``max_attempts_unknown``      |
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum
from typing import Any

from jobrail.jobs.context import JobCancelledError
from jobrail.jobs.ports import BrokerUnavailableError, StoreUnavailableError
from jobrail.jobs.retry import RetryPolicy
from jobrail.jobs.watchdog import LeaseLostError
from jobrail.kernel.errors import PermanentError, ThrottledError, TransientError
from jobrail.kernel.json_text import has_nul_escape
from jobrail.limits.model import LimitsUnavailableError

# Infrastructure the handler needed being away counts as transient.
_TRANSIENT = (TransientError, StoreUnavailableError, BrokerUnavailableError, LimitsUnavailableError)


class Next(Enum):
    CANCEL = "cancel"
    GIVE_BACK = "give back"
    RETRY = "retry"
    FAIL = "fail"
    THROTTLE = "throttle"


@dataclass(frozen=True, slots=True)
class Verdict:
    next: Next
    error: str = ""
    unknown: bool = False
    """An unexpected error (not one the platform or the handler named): fewer retries."""
    retry_after: timedelta | None = None
    """For THROTTLE: how long the throttling party asked to wait."""


def classify(exc: BaseException, timeout: timedelta) -> Verdict:
    """What `exc`, raised by an attempt that had `timeout`, means for the job."""
    if isinstance(exc, JobCancelledError):
        return Verdict(Next.CANCEL)
    if isinstance(exc, LeaseLostError):
        # Unconfirmed: the database stalled, not the job; a stall of a few seconds must
        # not use up a long job's attempts (nor fail it on its last). Bounded: only an
        # attempt that stopped on time is unconfirmed (see LeaseWatchdog).
        return Verdict(Next.GIVE_BACK if exc.unconfirmed else Next.RETRY, describe(exc))
    if isinstance(exc, PermanentError):
        return Verdict(Next.FAIL, f"permanent error: {describe(exc)}")
    if isinstance(exc, ThrottledError):
        return Verdict(
            Next.THROTTLE, describe(exc), retry_after=timedelta(seconds=exc.retry_after_s)
        )
    if isinstance(
        exc,
        TransientError | StoreUnavailableError | BrokerUnavailableError | LimitsUnavailableError,
    ):
        # Infrastructure the handler needed was away: as transient as it gets.
        return Verdict(Next.RETRY, describe(exc))
    if isinstance(exc, TimeoutError):
        return Verdict(Next.RETRY, f"timed out after {timeout.total_seconds():g}s")
    return Verdict(Next.RETRY, f"unexpected error: {describe(exc)}", unknown=True)


def retry_limit(verdict: Verdict, max_attempts: int, policy: RetryPolicy) -> int:
    """How many attempts in all a job may make for a failure of this kind."""
    return min(max_attempts, policy.max_attempts_unknown) if verdict.unknown else max_attempts


def stored_result(result: Mapping[str, Any] | None, max_bytes: int) -> dict[str, Any] | None:
    """A handler's result as the jobs table stores it: a JSON object of at most
    `max_bytes` (as UTF-8), without NUL; anything else is a PermanentError."""
    if result is None:
        return None
    try:
        text = json.dumps(dict(result), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise PermanentError(f"the job's result is not JSON: {exc}") from exc
    size = len(text.encode())
    if size > max_bytes:
        raise PermanentError(
            f"the job's result is {size} bytes of JSON, more than the {max_bytes} a job "
            "may store (JOBRAIL_JOBS__MAX_RESULT_BYTES): store large output elsewhere "
            "and return a reference"
        )
    if has_nul_escape(text):
        raise PermanentError("the job's result holds a NUL character (U+0000)")
    value = json.loads(text)
    assert isinstance(value, dict)
    return value


def describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
