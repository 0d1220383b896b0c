"""The account aggregate.

A sync pages through the vendor from the start, storing each page and moving the
cursor forward together; an interrupted sync resumes from its cursor. Every write
carries the fencing token of the lock its sync holds: a write from an older holder
(one that lost the lock) is refused.
"""

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from jobrail.kernel.errors import TransientError
from jobrail.kernel.ids import TenantId

# An account id goes into the vendor's URL as one path segment (accounts/{id}/items):
# it starts with a letter or digit, so it is never "." or ".." (which a URL resolves
# to the parent, escaping accounts/{id}/) nor anything else a URL treats specially.
ACCOUNT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,254}$"


class AccountStatus(StrEnum):
    NEVER_SYNCED = "never_synced"
    SYNCING = "syncing"
    SYNCED = "synced"
    FAILED = "failed"


class StaleHolderError(TransientError):
    """A sync whose lock was taken over tried to write; its write was refused."""


@dataclass(eq=False)
class Account:
    tenant_id: TenantId
    account_id: str
    status: AccountStatus = AccountStatus.NEVER_SYNCED
    cursor: str | None = None
    items_synced: int = 0
    last_synced_at: datetime | None = None
    last_error: str | None = None
    fence: int = 0
    syncs_started: int = 0

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Account) and (other.tenant_id, other.account_id) == (
            self.tenant_id,
            self.account_id,
        )

    def __hash__(self) -> int:
        return hash((self.tenant_id, self.account_id))

    def start_sync(self, fence: int) -> None:
        """Begin a sync, or resume the one an earlier holder left unfinished."""
        self._fenced(fence)
        if self.status is not AccountStatus.SYNCING:
            self.cursor = None
            self.syncs_started += 1
        self.status = AccountStatus.SYNCING
        self.last_error = None

    def page_stored(self, new_items: int, next_cursor: str | None, fence: int) -> None:
        self._fenced(fence)
        self.items_synced += new_items
        self.cursor = next_cursor

    def finish(self, now: datetime, fence: int) -> None:
        self._fenced(fence)
        self.status = AccountStatus.SYNCED
        self.cursor = None
        self.last_synced_at = now

    def fail(self, error: str, fence: int) -> None:
        self._fenced(fence)
        self.status = AccountStatus.FAILED
        self.last_error = error[:1000]

    def _fenced(self, fence: int) -> None:
        if fence < self.fence:
            raise StaleHolderError(
                f"account {self.account_id}: write with fence {fence} refused, "
                f"a newer holder wrote with {self.fence}"
            )
        self.fence = fence
