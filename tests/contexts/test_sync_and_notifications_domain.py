import pytest

from contexts.notifications.domain.notification import (
    Notification,
    NotificationId,
    NotificationRuleError,
    NotificationStatus,
)
from contexts.sync.domain.account import Account, AccountStatus, StaleHolderError
from jobrail.kernel.ids import TenantId, new_id
from tests.fakes import START


def test_a_sync_starts_from_the_first_page_and_resumes_an_unfinished_one() -> None:
    account = Account(TenantId("acme"), "a1")

    account.start_sync(fence=10)
    account.page_stored(10, "p1", fence=10)
    account.start_sync(fence=11)  # the first holder died; the next one resumes

    assert account.cursor == "p1"
    assert account.syncs_started == 1
    account.page_stored(10, None, fence=11)
    account.finish(START, fence=11)
    account.start_sync(fence=12)
    assert account.cursor is None
    assert account.syncs_started == 2


def test_a_write_with_an_older_fence_is_refused() -> None:
    account = Account(TenantId("acme"), "a1")
    account.start_sync(fence=20)

    with pytest.raises(StaleHolderError, match="fence 19 refused"):
        account.page_stored(10, "p1", fence=19)
    assert account.items_synced == 0


def test_finishing_records_when_and_clears_the_cursor() -> None:
    account = Account(TenantId("acme"), "a1")
    account.start_sync(fence=1)
    account.page_stored(7, "p1", fence=1)

    account.finish(START, fence=1)

    assert account.status is AccountStatus.SYNCED
    assert account.last_synced_at == START
    assert account.cursor is None
    assert account.items_synced == 7


def _notification() -> Notification:
    return Notification(
        id=NotificationId(new_id()),
        tenant_id=TenantId("acme"),
        recipient="c@example.com",
        template="receipt",
        subject_id="inv",
        source_event_id="e1",
        created_at=START,
    )


def test_a_notification_counts_attempts_until_it_is_sent() -> None:
    notification = _notification()

    notification.sending_failed("421 try later", permanent=False)
    notification.sent(START)

    assert notification.status is NotificationStatus.SENT
    assert notification.attempts == 2
    assert notification.last_error is None


def test_a_sent_notification_is_not_sent_again() -> None:
    notification = _notification()
    notification.sent(START)

    with pytest.raises(NotificationRuleError):
        notification.sent(START)


def test_a_permanent_failure_ends_the_notification() -> None:
    notification = _notification()

    notification.sending_failed("550 no such user", permanent=True)

    assert notification.status is NotificationStatus.FAILED
