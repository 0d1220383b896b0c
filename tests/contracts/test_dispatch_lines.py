"""A second level of fair dispatch inside a tenant's share, on SQLite and Postgres alike:
a job type's `fair_key` splits a tenant's jobs into lines, which share the tenant's
releases equally; the tenant's own share stays its weight, whatever its number of
lines. Counted by the order of a dispatcher's releases."""

from collections import Counter

from jobrail.kernel.ids import JobId
from tests.support.dispatch_store import (
    CountingStore,
    ReadyCount,
    SentMessages,
    Subject,
    held,
    make_dispatcher,
)

QUEUE = "jobs.default"


async def _release_all(subject: Subject, count: int) -> list[JobId]:
    """Release `count` held jobs, a pass of 6 at a time, in order."""
    gauge, sender = ReadyCount(0), SentMessages()
    dispatcher = make_dispatcher(subject, gauge, sender, 6)
    for _ in range(count):
        if len(sender.messages) >= count:
            break
        await dispatcher.pass_once(QUEUE)
    return [message.job_id for message in sender.messages]


async def test_a_late_key_shares_its_tenant_s_releases_at_once(subject: Subject) -> None:
    early = [await subject.add(held("a", fair_key="user-1")) for _ in range(30)]
    late = [await subject.add(held("a", fair_key="user-2")) for _ in range(5)]
    owner = {job.id: job.fair_key for job in [*early, *late]}

    order = [owner[job_id] for job_id in await _release_all(subject, 35)]

    assert len(order) == 35
    # Turn by turn: user-2's five are among the first eleven, not behind user-1's thirty.
    assert Counter(order[:10]) == {"user-1": 5, "user-2": 5}
    assert [n for n, key in enumerate(order) if key == "user-1"] == sorted(
        n for n, key in enumerate(order) if key == "user-1"
    )


async def test_a_tenant_s_share_is_its_weight_however_many_keys_it_has(
    subject: Subject,
) -> None:
    keyed = [await subject.add(held("a", fair_key=f"user-{n % 3}")) for n in range(30)]
    single = [await subject.add(held("b")) for _ in range(30)]
    tenant = {job.id: job.tenant_id for job in [*keyed, *single]}

    order = [tenant[job_id] for job_id in await _release_all(subject, 36)]

    assert Counter(order[:36]) == {"a": 18, "b": 18}


async def test_lines_that_ran_dry_are_read_once_more_not_once_per_dry_line(
    subject: Subject,
) -> None:
    """Many tenants of a few jobs each (1,000 tenants in the bench): each line's heads
    are read while it has jobs, and once to find it empty. Each line found empty sent
    the pass back to read every other empty line again, as many times as there were."""
    for tenant in range(20):
        for _ in range(5):
            await subject.add(held(f"t{tenant}"))
    store = subject.store = CountingStore(subject.engine)
    dispatcher = make_dispatcher(subject, ReadyCount(0), SentMessages(), 100)

    assert await dispatcher.pass_once(QUEUE) == 100
    assert await dispatcher.pass_once(QUEUE) == 0  # every line found empty
    assert store.line_reads <= 2 * 20, store.line_reads
