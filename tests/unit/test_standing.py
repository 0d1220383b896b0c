"""Where a waiting job stands (jobrail.jobs.standing): why it waits, first of what
applies (paused, its debounce window, its run_at, a retry's backoff, its tenant's line
under fair dispatch, what its limits noted), its place in line and when it may start
from the queue's figures; and how ``GET /jobs/{id}`` shows it (``JobOut.waiting``)."""

import uuid
from dataclasses import replace
from datetime import timedelta

from jobrail.jobs.domain import Job, JobStatus, Wait, WaitsOn
from jobrail.jobs.get import GetJob, GetJobQuery
from jobrail.jobs.ports import LinePlace, Pause
from jobrail.jobs.schemas import JobEventOut, JobOut
from jobrail.jobs.standing import Standing, standing_of
from jobrail.kernel.ids import TenantId
from tests.fakes import START, FakePauses, FakeUnitOfWork, FixedClock, make_job

NOW = START + timedelta(minutes=1)
# 7 of its tenant's jobs ahead; the queue starts 7 a second among tenants of total
# weight 4, of which its tenant has 2: 14 jobs start before it, in 2 s.
PLACE = LinePlace(
    ahead=7, capped=False, higher_ahead=0, weight=2.0, drain_per_s=7.0, active_weight=4.0
)


def held(**overrides: object) -> Job:
    job = make_job(**overrides)
    job.hold()
    return job


def test_a_job_that_is_not_waiting_or_is_with_the_workers_stands_nowhere() -> None:
    running = make_job()
    running.start(START, timedelta(seconds=30))
    released = make_job()  # due, not held, nothing noted: its message is on its way

    assert standing_of(running, NOW, place=PLACE) is None
    assert standing_of(released, NOW) is None


def test_a_held_job_has_its_place_in_its_tenant_s_line_and_an_estimate() -> None:
    job = held()

    standing = standing_of(job, NOW, place=PLACE)

    assert standing == Standing(
        reason="fair_share",
        since=START,
        position=8,
        higher_priority_ahead=0,
        ahead_in_queue=14,
        eta=NOW + timedelta(seconds=2),
    )
    assert standing.ahead_in_tenant == 7


def test_jobs_of_a_higher_priority_ahead_make_it_wait_for_priority() -> None:
    standing = standing_of(held(), NOW, place=replace(PLACE, higher_ahead=3))

    assert standing is not None
    assert (standing.reason, standing.higher_priority_ahead) == ("priority", 3)


def test_a_line_longer_than_the_count_says_so() -> None:
    standing = standing_of(held(), NOW, place=replace(PLACE, ahead=10_000, capped=True))

    assert standing is not None
    assert (standing.position, standing.ahead_capped) == (10_001, True)


def test_without_the_queue_s_figures_there_is_no_estimate() -> None:
    for figures in (
        {"drain_per_s": None},
        {"active_weight": None},
        {"drain_per_s": 0.0},
        {"drain_per_s": float("nan")},
        {"drain_per_s": 1e-300},  # further off than anyone should be told
    ):
        standing = standing_of(held(), NOW, place=replace(PLACE, **figures))  # type: ignore[arg-type]
        assert standing is not None
        assert standing.eta is None, figures
        assert standing.position == 8


def test_figures_that_do_not_count_its_tenant_yet_count_it_alone() -> None:
    standing = standing_of(held(), NOW, place=replace(PLACE, active_weight=1.0))

    assert standing is not None
    assert standing.ahead_in_queue == 7  # never fewer than its own tenant's


def test_a_paused_job_says_since_when_and_has_its_place_but_no_estimate() -> None:
    pause = Pause("tenant", "acme", START - timedelta(hours=1))

    standing = standing_of(held(), NOW, pause=pause, place=PLACE)

    assert standing is not None
    assert (standing.reason, standing.since, standing.pause) == ("paused", pause.paused_at, pause)
    assert (standing.position, standing.eta) == (8, None)


def test_a_job_due_later_waits_for_its_run_at_its_debounce_window_or_its_retry() -> None:
    later = NOW + timedelta(hours=1)
    debounced = make_job(run_after=later, debounce_key="digest")
    retrying = make_job()
    retrying.start(START, timedelta(seconds=30))
    retrying.retry_later("boom", later, START + timedelta(seconds=5))

    for job, reason, since in (
        (make_job(run_after=later), "run_at", START),
        (debounced, "debounce", START),
        (retrying, "retry", START + timedelta(seconds=5)),
    ):
        standing = standing_of(job, NOW)
        assert standing == Standing(reason=reason, since=since, until=later), reason


def test_a_held_job_due_later_has_its_place_and_starts_no_sooner_than_due() -> None:
    job = make_job(run_after=NOW + timedelta(hours=1))
    job.hold()

    standing = standing_of(job, NOW, place=PLACE)

    assert standing is not None
    assert (standing.reason, standing.position) == ("run_at", 8)
    assert standing.eta == NOW + timedelta(hours=1)


def test_a_job_its_limits_turned_away_says_what_turned_it_away() -> None:
    holder = str(uuid.uuid4())
    for on, reason in (
        ((WaitsOn("lock", "lock", "report:7", holder),), "lock"),
        ((WaitsOn("rate_limit", "vendor", "vendor:acme"),), "rate_limit"),
        ((WaitsOn("concurrency", "slots", "pool"), WaitsOn("lock", "lock", "k")), "concurrency"),
    ):
        job = make_job()
        job.waiting = Wait(on=on, until=NOW + timedelta(seconds=3), since=START)

        standing = standing_of(job, NOW)

        assert standing == Standing(reason=reason, since=START, until=job.waiting.until, on=on)


def test_a_job_given_back_after_its_claim_names_the_limit_not_a_retry() -> None:
    on = (WaitsOn("rate_limit", "vendor", "vendor:acme"),)
    later = NOW + timedelta(seconds=3)
    job = make_job()
    job.start(START, timedelta(seconds=30))
    job.throttled("limited by vendor", later, START)
    job.waiting = Wait(on=on, until=later, since=START)

    assert standing_of(job, NOW) == Standing(reason="rate_limit", since=START, until=later, on=on)


def test_the_api_shows_the_standing_and_a_note_alone_where_none_is_read() -> None:
    holder = uuid.uuid4()
    job = held()
    job.waiting = Wait(
        on=(WaitsOn("lock", "lock", "report:7", str(holder)),),
        until=NOW,
        since=START,
    )
    standing = replace(
        standing_of(job, NOW, place=PLACE),  # type: ignore[arg-type]
        on=job.waiting.on,
    )

    shown = JobOut.of(job, standing=standing).model_dump(mode="json")["waiting"]
    listed = JobOut.of(job).model_dump(mode="json")["waiting"]
    event = JobEventOut.model_validate(
        {**_event_fields(job), "waiting": job.waiting.as_json()}
    ).model_dump(mode="json")["waiting"]

    assert shown == {
        "reason": "fair_share",
        "since": "2026-11-30T12:00:00Z",
        "until": None,
        "on": [{"kind": "lock", "name": "lock", "key": "report:7", "held_by_job_id": str(holder)}],
        "position": 8,
        "ahead_in_tenant": 7,
        "ahead_capped": False,
        "higher_priority_ahead": 0,
        "ahead_in_queue": 14,
        "eta": "2026-11-30T12:01:02Z",
    }
    # A list, and an event, show the note: the lock's holder is named on a job's own
    # read only, once it is known to be one of the tenant's jobs.
    assert listed["reason"] == event["reason"] == "lock"
    assert listed["on"] == event["on"] == [{**shown["on"][0], "held_by_job_id": None}]
    assert listed["position"] is event["position"] is None


def _event_fields(job: Job) -> dict[str, object]:
    return {
        "id": "1-0",
        "event": "deferred",
        "job_id": job.id,
        "job_type": job.type,
        "at": NOW,
        "status": "pending",
        "attempts": 0,
        "last_error": None,
        "run_after": None,
        "progress": None,
        "flow_id": None,
    }


class Places:
    def __init__(self) -> None:
        self.asked: list[Job] = []

    async def place_of(self, job: Job) -> LinePlace:
        self.asked.append(job)
        return PLACE


async def test_get_names_a_lock_s_holder_only_if_it_is_one_of_the_tenant_s_jobs() -> None:
    uow = FakeUnitOfWork()
    mine, theirs = make_job(), make_job(tenant_id=TenantId("globex"))
    waiting = make_job()
    for job in (mine, theirs, waiting):
        uow.store[job.id] = job
    places = Places()
    get = GetJob(uow, FakePauses(), places, FixedClock(NOW))

    async def holder_shown(holder: Job | None) -> str | None:
        waiting.waiting = Wait(
            on=(WaitsOn("lock", "lock", "k", str(holder.id) if holder else "not-an-id"),),
            until=NOW,
            since=START,
        )
        standing = await get.standing_of(await get(GetJobQuery(TenantId("acme"), waiting.id)))
        assert standing is not None
        return standing.on[0].held_by

    assert await holder_shown(mine) == str(mine.id)
    assert await holder_shown(theirs) is None
    assert await holder_shown(None) is None
    assert places.asked == []  # none was held: no line was read


async def test_get_reads_the_line_of_a_held_job_only() -> None:
    uow = FakeUnitOfWork()
    job = held()
    uow.store[job.id] = job
    places = Places()
    get = GetJob(uow, FakePauses(), places, FixedClock(NOW))

    standing = await get.standing_of(job)
    job.status = JobStatus.CANCELLED
    ended = await get.standing_of(job)

    assert standing is not None
    assert standing.position == 8
    assert ended is None
    assert places.asked == [job]
