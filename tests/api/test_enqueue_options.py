"""The enqueue options over HTTP (the query of ``POST /demo/echo``, the body of
``POST /jobs``) and in Python (``JobHandle.enqueue``), and ``POST /jobs`` for the job
types a module opened to tenants, in embedded mode."""

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from jobrail import JobContext, JobHandle, JobRail
from jobrail.kernel.errors import InvalidInputError
from tests.api.conftest import embedded_settings, migrated
from tests.support.fixtures import ApiClient
from tests.support.host_app import RenderReport, declare_jobs


def iso(moment: datetime) -> str:
    return moment.isoformat()


def parsed(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def refusal(response: httpx.Response) -> tuple[int, list[tuple[tuple[str, ...], str]]]:
    """The status and each refused option's (loc, type)."""
    details = response.json()["error"]["details"]
    return response.status_code, [(tuple(d["loc"]), d["type"]) for d in details]


async def no_jobs(api: ApiClient) -> bool:
    items: list[Any] = (await api.get("/jobs")).json()["items"]
    return items == []


# -- the query of a route whose body is the payload ------------------------------------


async def test_a_delay_puts_the_job_off_while_other_work_runs(api: ApiClient) -> None:
    before = datetime.now(UTC)
    response = await api.post("/demo/echo", params={"delay": 7200}, json={"message": "later"})
    after = datetime.now(UTC)
    assert response.status_code == 202, response.text
    later = response.json()["job_id"]

    now = await api.echo(message="now")
    await api.wait_status(now, "succeeded", timeout=10)
    job = await api.job(later)

    assert before + timedelta(hours=2) <= parsed(job["run_after"]) <= after + timedelta(hours=2)
    assert (job["status"], job["attempts"], job["started_at"]) == ("pending", 0, None)


async def test_run_at_in_the_future_is_the_jobs_run_after(api: ApiClient) -> None:
    at = (datetime.now(UTC) + timedelta(days=3)).replace(microsecond=0)
    # Another zone: the time is kept, as UTC.
    given = at.astimezone(datetime.now().astimezone().tzinfo).isoformat()
    response = await api.post("/demo/echo", params={"run_at": given}, json={"message": "x"})

    assert response.status_code == 202, response.text
    job = await api.job(response.json()["job_id"])
    assert parsed(job["run_after"]) == at
    assert job["status"] == "pending"


async def test_a_deadline_and_a_unique_key_in_the_query_reach_the_job(api: ApiClient) -> None:
    deadline = (datetime.now(UTC) + timedelta(hours=3)).replace(microsecond=0)
    params = {"delay": 3600, "deadline": iso(deadline), "unique_key": "nightly"}
    first = await api.post("/demo/echo", params=params, json={"message": "a"})
    again = await api.post("/demo/echo", params=params, json={"message": "b"})

    assert first.status_code == 202, first.text
    job = await api.job(first.json()["job_id"])
    assert (parsed(job["deadline"]), job["unique_key"]) == (deadline, "nightly")
    # The key is held while the first is pending: the second enqueue returns it.
    assert again.json()["job_id"] == first.json()["job_id"]


async def test_a_priority_in_the_query_or_the_body_reaches_the_job(api: ApiClient) -> None:
    by_query = await api.post("/demo/echo", params={"priority": "high"}, json={"message": "a"})
    by_body = await api.post(
        "/jobs",
        json={"type": "demo.echo", "payload": {"message": "b"}, "priority": "urgent"},
    )
    default = await api.post("/demo/echo", json={"message": "c"})
    unknown = await api.post("/demo/echo", params={"priority": "asap"}, json={"message": "d"})

    assert by_query.status_code == by_body.status_code == 202, (by_query.text, by_body.text)
    assert (await api.job(by_query.json()["job_id"]))["priority"] == "high"
    assert (await api.job(by_body.json()["job_id"]))["priority"] == "urgent"
    assert (await api.job(default.json()["job_id"]))["priority"] == "normal"
    status, problems = refusal(unknown)
    assert status == 422
    assert problems[0][0] == ("query", "priority")


async def test_run_at_in_the_past_runs_at_once(api: ApiClient) -> None:
    past = (datetime.now(UTC) - timedelta(hours=1)).replace(microsecond=0)
    response = await api.post("/demo/echo", params={"run_at": iso(past)}, json={"message": "x"})

    assert response.status_code == 202, response.text
    job_id = response.json()["job_id"]
    job = await api.wait_status(job_id, "succeeded", timeout=10)
    assert job["result"] == {"echo": "x"}
    # It was enqueued with the time it was given (a start clears run_after).
    [enqueued] = [
        event
        for event in (await api.get(f"/jobs/{job_id}/events")).json()["items"]
        if event["event"] == "enqueued"
    ]
    assert parsed(enqueued["run_after"]) == past


async def test_a_naive_run_at_is_a_422_that_says_it_needs_a_zone(api: ApiClient) -> None:
    response = await api.post(
        "/demo/echo", params={"run_at": "2030-01-01T09:00:00"}, json={"message": "x"}
    )

    assert refusal(response) == (422, [(("query", "run_at"), "timezone_aware")])
    assert "timezone" in response.json()["error"]["details"][0]["msg"]
    assert await no_jobs(api)


async def test_run_at_with_a_delay_is_a_422_naming_both(api: ApiClient) -> None:
    soon = iso(datetime.now(UTC) + timedelta(minutes=5))
    response = await api.post(
        "/demo/echo", params={"run_at": soon, "delay": 60}, json={"message": "x"}
    )

    assert refusal(response) == (422, [(("query", "delay"), "exclusive")])
    message = response.json()["error"]["details"][0]["msg"]
    assert "run_at" in message
    assert "delay" in message
    assert await no_jobs(api)


@pytest.mark.parametrize(
    ("delay", "kind"),
    [
        ("-1", "greater_than_equal"),
        ("31622401", "less_than_equal"),  # past 366 days
        ("nan", "finite_number"),
        ("soon", "float_parsing"),
    ],
)
async def test_a_delay_out_of_bounds_is_a_422(api: ApiClient, delay: str, kind: str) -> None:
    response = await api.post("/demo/echo", params={"delay": delay}, json={"message": "x"})

    assert refusal(response) == (422, [(("query", "delay"), kind)])
    assert await no_jobs(api)


async def test_a_deadline_before_the_start_is_a_422(api: ApiClient) -> None:
    now = datetime.now(UTC)
    before_run_at = await api.post(
        "/demo/echo",
        params={"run_at": iso(now + timedelta(hours=2)), "deadline": iso(now + timedelta(hours=1))},
        json={"message": "x"},
    )
    before_delay = await api.post(
        "/demo/echo",
        params={"delay": 7200, "deadline": iso(now + timedelta(hours=1))},
        json={"message": "x"},
    )
    past = await api.post(
        "/demo/echo", params={"deadline": iso(now - timedelta(minutes=1))}, json={"message": "x"}
    )

    for response in (before_run_at, before_delay, past):
        assert refusal(response) == (422, [(("query", "deadline"), "not_after_start")])
    assert await no_jobs(api)


async def test_a_run_at_more_than_a_year_ahead_and_a_bad_unique_key_are_422s(
    api: ApiClient,
) -> None:
    far = await api.post(
        "/demo/echo",
        params={"run_at": iso(datetime.now(UTC) + timedelta(days=400))},
        json={"message": "x"},
    )
    control = await api.post("/demo/echo", params={"unique_key": "a\tb"}, json={"message": "x"})
    blank = await api.post("/demo/echo", params={"unique_key": "   "}, json={"message": "x"})

    assert refusal(far) == (422, [(("query", "run_at"), "too_late")])
    assert refusal(control) == (422, [(("query", "unique_key"), "control_characters")])
    assert refusal(blank) == (422, [(("query", "unique_key"), "string_too_short")])
    assert await no_jobs(api)


async def test_the_openapi_schema_documents_the_options_of_demo_echo(api: ApiClient) -> None:
    operation = api.app.openapi()["paths"]["/demo/echo"]["post"]
    query = {p["name"]: p for p in operation["parameters"] if p["in"] == "query"}

    assert set(query) == {
        "run_at",
        "delay",
        "deadline",
        "unique_key",
        "debounce_key",
        "debounce_s",
        "priority",
    }
    assert all(not p["required"] for p in query.values())
    assert {"type": "number", "minimum": 0, "maximum": 31_622_400} in query["delay"]["schema"][
        "anyOf"
    ]


async def test_debounced_echoes_collapse_into_one_run_with_the_last_message(
    api: ApiClient,
) -> None:
    query = {"debounce_key": "greeting", "debounce_s": "0.5"}
    answers = [
        await api.post("/demo/echo", json={"message": f"m{n}"}, params=query) for n in range(3)
    ]

    assert [a.status_code for a in answers] == [202, 202, 202]
    job_ids = {a.json()["job_id"] for a in answers}
    assert len(job_ids) == 1
    done = await api.wait_status(job_ids.pop(), "succeeded")
    assert done["result"] == {"echo": "m2"}
    assert done["attempts"] == 1


@pytest.mark.parametrize(
    ("query", "loc"),
    [
        ({"debounce_key": "k"}, "debounce_s"),
        ({"debounce_s": "1"}, "debounce_key"),
        ({"debounce_key": "k", "debounce_s": "1", "delay": "5"}, "debounce_key"),
        ({"debounce_key": "k", "debounce_s": "0"}, "debounce_s"),
        ({"debounce_key": "k", "debounce_s": "nan"}, "debounce_s"),
        ({"debounce_key": "a\x01b", "debounce_s": "1"}, "debounce_key"),
        ({"debounce_key": "   ", "debounce_s": "1"}, "debounce_key"),
    ],
)
async def test_a_debounce_that_does_not_hold_is_a_422_naming_it(
    api: ApiClient, query: dict[str, str], loc: str
) -> None:
    response = await api.post("/demo/echo", json={"message": "m"}, params=query)

    assert response.status_code == 422, response.text
    assert ["query", loc] in [d["loc"] for d in response.json()["error"]["details"]]


async def test_a_debounce_with_an_idempotency_key_is_a_422(api: ApiClient) -> None:
    response = await api.post(
        "/jobs",
        json={
            "type": "demo.echo",
            "payload": {"message": "m"},
            "debounce_key": "k",
            "debounce_s": 1,
        },
        headers={"Idempotency-Key": "req-1"},
    )

    assert response.status_code == 422, response.text
    assert "debounce cannot be combined with Idempotency-Key" in response.text


# -- POST /jobs ---------------------------------------------------------------------------


async def test_post_jobs_enqueues_an_open_type_and_it_runs(api: ApiClient) -> None:
    response = await api.post(
        "/jobs",
        json={"type": "demo.echo", "payload": {"message": "open"}, "entity_id": "e-1"},
    )

    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "pending"
    assert response.headers["Location"] == f"/jobs/{body['job_id']}"
    job = await api.wait_status(body["job_id"], "succeeded", timeout=10)
    assert (job["type"], job["entity_id"], job["result"]) == ("demo.echo", "e-1", {"echo": "open"})


async def test_post_jobs_takes_the_options_in_its_body(api: ApiClient) -> None:
    at = (datetime.now(UTC) + timedelta(hours=5)).replace(microsecond=0)
    response = await api.post(
        "/jobs",
        json={
            "type": "demo.echo",
            "payload": {"message": "x"},
            "run_at": iso(at),
            "deadline": iso(at + timedelta(hours=1)),
            "unique_key": "report-7",
        },
    )
    naive = await api.post(
        "/jobs",
        json={"type": "demo.echo", "payload": {"message": "x"}, "run_at": "2030-01-01T00:00:00"},
    )
    both = await api.post(
        "/jobs",
        json={"type": "demo.echo", "payload": {"message": "x"}, "run_at": iso(at), "delay": 5},
    )

    assert response.status_code == 202, response.text
    job = await api.job(response.json()["job_id"])
    assert parsed(job["run_after"]) == at
    assert parsed(job["deadline"]) == at + timedelta(hours=1)
    assert job["unique_key"] == "report-7"
    assert refusal(naive) == (422, [(("body", "run_at"), "timezone_aware")])
    assert refusal(both) == (422, [(("body", "delay"), "exclusive")])


@pytest.mark.parametrize(
    "job_type",
    [
        "webhooks.deliver",  # a webhook delivery
        "maintenance.prune_jobs",  # housekeeping
        "demo.batch_sum",  # a batch's callback
        "billing.pay_invoice",  # a context's own step
        "no.such_type",
    ],
)
async def test_post_jobs_refuses_a_closed_or_unknown_type_alike(
    api: ApiClient, job_type: str
) -> None:
    response = await api.post("/jobs", json={"type": job_type, "payload": {}})

    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_input"
    assert error["message"] == f"job type {job_type!r} is not one a tenant may enqueue"
    assert error["details"] == [
        {"loc": ["type"], "msg": "not a job type open to tenants", "type": "closed"}
    ]
    assert await no_jobs(api)


async def test_of_the_reference_apps_types_only_the_demos_echo_is_open(api: ApiClient) -> None:
    from jobrail.runtime.app import runtime_of

    registry = runtime_of(api.app).registry
    names = {spec.name for spec in registry}

    assert {"webhooks.deliver", "maintenance.prune_jobs", "demo.batch_sum"} <= names
    assert [spec.name for spec in registry if spec.open_to_tenants] == ["demo.echo"]


async def test_post_jobs_refuses_a_payload_that_does_not_fit(api: ApiClient) -> None:
    response = await api.post(
        "/jobs", json={"type": "demo.echo", "payload": {"message": 5, "sleep_ms": -1}}
    )
    no_payload = await api.post("/jobs", json={"type": "demo.echo"})

    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_input"
    assert {tuple(d["loc"]) for d in error["details"]} == {("message",), ("sleep_ms",)}
    assert refusal(no_payload) == (422, [(("body", "payload"), "missing")])
    assert await no_jobs(api)


async def test_post_jobs_honours_the_idempotency_key(api: ApiClient) -> None:
    body = {"type": "demo.echo", "payload": {"message": "once"}}
    key = {"Idempotency-Key": "k-1"}
    first = await api.post("/jobs", json=body, headers=key)
    again = await api.post("/jobs", json=body, headers=key)
    other = await api.post("/jobs", json={**body, "payload": {"message": "twice"}}, headers=key)

    assert (first.status_code, again.status_code) == (202, 202)
    assert again.json()["job_id"] == first.json()["job_id"]
    assert again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert other.status_code == 409
    assert len((await api.get("/jobs")).json()["items"]) == 1


async def test_post_jobs_is_rate_limited_as_an_enqueue(api: ApiClient) -> None:
    response = await api.post("/jobs", json={"type": "demo.echo", "payload": {"message": "x"}})

    assert response.status_code == 202
    # The enqueue group's limit (30 a minute per tenant), not the read group's.
    assert response.headers["RateLimit-Limit"] == "30"


# -- a host's JobRail: the handle and its router --------------------------------------------


class Note(BaseModel):
    text: str


class Host:
    def __init__(
        self, rail: JobRail, render: JobHandle[RenderReport], http: httpx.AsyncClient
    ) -> None:
        self.rail = rail
        self.render = render
        self.http = http


@pytest.fixture
async def host(tmp_path: Path) -> AsyncIterator[Host]:
    rail = JobRail(await migrated(embedded_settings(tmp_path, modules=[])))
    render = declare_jobs(rail)

    @rail.job("notes.write", payload=Note, open_to_tenants=True)
    async def write(payload: Note, ctx: JobContext) -> dict[str, str]:
        return {"wrote": payload.text}

    async def tenant() -> str:
        return "acme"

    from fastapi import FastAPI

    app = FastAPI(lifespan=rail.lifespan)
    app.include_router(rail.router(tenant=tenant, prefix="/api/jobs"))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://host") as http,
    ):
        yield Host(rail, render, http)


async def test_a_handles_delay_sets_the_jobs_run_after(host: Host) -> None:
    before = await host.rail.now()
    by_seconds = await host.render.enqueue(
        RenderReport(report_id="r-1"), tenant_id="acme", delay=3600
    )
    by_timedelta = await host.render.enqueue(
        RenderReport(report_id="r-2"), tenant_id="acme", delay=timedelta(minutes=5)
    )
    at = datetime.now(UTC) + timedelta(hours=1)
    by_alias = await host.render.enqueue(
        RenderReport(report_id="r-3"), tenant_id="acme", run_after=at
    )
    after = await host.rail.now()

    for result, delay in ((by_seconds, timedelta(hours=1)), (by_timedelta, timedelta(minutes=5))):
        assert result.job.run_after is not None
        assert before + delay <= result.job.run_after <= after + delay
    assert by_alias.job.run_after == at


async def test_a_handles_debounce_collapses_its_enqueues(host: Host) -> None:
    first = await host.render.enqueue(
        RenderReport(report_id="a"), tenant_id="acme", debounce_key="k", debounce_s=30
    )
    second = await host.render.enqueue(
        RenderReport(report_id="b"), tenant_id="acme", debounce_key="k", debounce_s=30
    )

    assert (first.created, second.created) == (True, False)
    assert second.job.id == first.job.id
    assert second.job.payload["report_id"] == "b"


async def test_a_handle_refuses_options_that_do_not_hold(host: Host) -> None:
    soon = datetime.now(UTC) + timedelta(minutes=5)
    report = RenderReport(report_id="r-1")

    with pytest.raises(InvalidInputError, match="run_at and delay"):
        await host.render.enqueue(report, tenant_id="acme", run_at=soon, delay=5)
    with pytest.raises(InvalidInputError, match="timezone-aware"):
        await host.render.enqueue(report, tenant_id="acme", run_at=datetime(2030, 1, 1))
    with pytest.raises(InvalidInputError, match="deadline"):
        await host.render.enqueue(report, tenant_id="acme", delay=600, deadline=soon)
    with pytest.raises(InvalidInputError, match="former name"):
        await host.render.enqueue(report, tenant_id="acme", run_at=soon, run_after=soon)


async def test_a_hosts_router_enqueues_its_open_types_only(host: Host) -> None:
    response = await host.http.post(
        "/api/jobs", json={"type": "notes.write", "payload": {"text": "hi"}, "delay": 0}
    )
    closed = await host.http.post(
        "/api/jobs", json={"type": "reports.render", "payload": {"report_id": "r-1"}}
    )

    assert response.status_code == 202, response.text
    job_id = response.json()["job_id"]
    assert response.headers["Location"] == f"/api/jobs/{job_id}"

    async def succeeded() -> dict[str, Any] | None:
        body: dict[str, Any] = (await host.http.get(f"/api/jobs/{job_id}")).json()
        return body if body["status"] == "succeeded" else None

    from tests.support.services import wait_for

    job = await wait_for(succeeded, timeout=10, what="the note to be written")
    assert job["result"] == {"wrote": "hi"}
    assert (closed.status_code, closed.json()["error"]["code"]) == (422, "invalid_input")


async def test_an_enqueue_says_whether_it_made_a_job_and_only_a_replay_says_replayed(
    api: ApiClient,
) -> None:
    later = {"unique_key": "report-7", "delay": "3600"}
    first = await api.post("/demo/echo", json={"message": "a"}, params=later)
    held = await api.post("/demo/echo", json={"message": "b"}, params=later)
    key = {"Idempotency-Key": "req-7"}
    made = await api.post("/demo/echo", json={"message": "c"}, headers=key)
    replayed = await api.post("/demo/echo", json={"message": "c"}, headers=key)

    assert first.json()["created"] is True
    assert held.json() == {**first.json(), "created": False}
    assert "Idempotent-Replayed" not in held.headers  # the unique key's job: no replay
    assert made.json()["created"] is True
    assert replayed.json()["job_id"] == made.json()["job_id"]
    assert replayed.json()["created"] is False
    assert replayed.headers["Idempotent-Replayed"] == "true"


async def test_a_redrive_while_a_newer_job_holds_the_key_is_a_409_not_a_500(
    api: ApiClient,
) -> None:
    admin = await api.auth("ops", admin=True)
    keyed = {"unique_key": "k-redrive"}
    failed = await api.post("/demo/echo", json={"message": "f", "fail_times": 10}, params=keyed)
    await api.wait_status(failed.json()["job_id"], "failed")
    newer = await api.post("/demo/echo", json={"message": "n"}, params={**keyed, "delay": "3600"})

    refused = await api.post(f"/jobs/{failed.json()['job_id']}/redrive", headers=admin)

    assert newer.json()["created"] is True
    assert refused.status_code == 409, refused.text
    assert "k-redrive" in refused.json()["error"]["message"]
    assert (await api.job(failed.json()["job_id"]))["status"] == "failed"
