"""Errors with a meaning the API and the job runner both understand.

Domain and application code raise these; the API maps them to HTTP statuses and
the job runner maps them to job outcomes (retry, fail, ...).
"""

from typing import Any


class DomainError(Exception):
    """A business rule was broken. The message is safe to show to the caller."""


class NotFoundError(DomainError):
    """The thing asked for does not exist, or belongs to another tenant."""


class ConflictError(DomainError):
    """The request is valid but conflicts with the current state."""


class InvalidInputError(DomainError):
    """The request is malformed in a way only the application can tell."""

    def __init__(self, message: str, details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.details = details or []


class QueuedCapError(DomainError):
    """The tenant has as many jobs waiting to start as its cap allows: the enqueue is
    refused (HTTP 429) until some of them start."""

    def __init__(self, tenant_id: str, cap: int) -> None:
        super().__init__(
            f"tenant {tenant_id!r} has {cap} jobs waiting to start, its cap (max_queued): "
            "try again once some have started"
        )
        self.cap = cap


class TransientError(Exception):
    """A failure that may go away by itself: retry the job later with backoff."""


class ThrottledError(TransientError):
    """Someone else's rate limit said "not now" (a vendor's 429). The job waits
    `retry_after_s` and tries again without spending an attempt: being throttled is
    not the job failing."""

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class PermanentError(Exception):
    """A failure that retrying cannot fix: fail the job at once."""


class StoreUnavailableError(Exception):
    """The database cannot be reached. Nothing was written; the caller may try again."""


class BrokerUnavailableError(Exception):
    """The message broker cannot be reached or did not confirm a publish."""
