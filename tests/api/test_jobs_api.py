import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from dishka.integrations.fastapi import DishkaRoute
from fastapi import APIRouter, FastAPI

from jobrail.runtime.app import add_routes, create_app
from tests.api.conftest import embedded_settings, migrated
from tests.support.apps import REFERENCE
from tests.support.fixtures import ApiClient


async def test_enqueue_answers_202_with_a_job_id_and_a_location(api: ApiClient) -> None:
    response = await api.post("/demo/echo", json={"message": "hi"})

    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "pending"
    assert response.headers["Location"] == f"/jobs/{body['job_id']}"
    job = await api.wait_status(body["job_id"], "succeeded", timeout=5)
    assert job["result"] == {"echo": "hi"}


async def test_a_bad_body_is_a_422_that_names_the_field(api: ApiClient) -> None:
    response = await api.post("/demo/echo", json={"message": "x", "sleep_ms": -1, "extra": 1})

    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert {tuple(d["loc"]) for d in error["details"]} == {
        ("body", "sleep_ms"),
        ("body", "extra"),
    }


async def test_malformed_json_is_a_422_with_a_json_body(api: ApiClient) -> None:
    response = await api.post(
        "/demo/echo", content=b"{not json", headers={"content-type": "application/json"}
    )

    assert response.status_code == 422
    assert response.json()["error"]["code"] == "validation_error"


async def test_an_unknown_job_is_a_404_and_a_bad_id_a_422(api: ApiClient) -> None:
    missing = await api.get(f"/jobs/{uuid.uuid4()}")
    bad = await api.get("/jobs/not-a-uuid")

    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    assert bad.status_code == 422


async def test_an_unknown_route_is_a_json_404(api: ApiClient) -> None:
    response = await api.get("/nope")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


async def test_another_tenants_job_is_not_found_and_not_listed(api: ApiClient) -> None:
    acme, globex = await api.auth("acme"), await api.auth("globex")
    job_id = await api.echo(headers=acme)

    assert (await api.get(f"/jobs/{job_id}", headers=acme)).status_code == 200
    assert (await api.get(f"/jobs/{job_id}", headers=globex)).status_code == 404
    assert (await api.get(f"/jobs/{job_id}")).status_code == 404  # the demo tenant's key
    listed = await api.get("/jobs", headers=globex)
    assert listed.json()["items"] == []
    cancel = await api.post(f"/jobs/{job_id}/cancel", headers=globex)
    assert cancel.status_code == 404


async def test_jobs_are_listed_newest_first_in_pages_and_filtered(api: ApiClient) -> None:
    ids = [await api.echo(message=str(i)) for i in range(5)]
    failing = await api.echo(permanent=True)
    await api.wait_status(failing, "failed", timeout=5)
    for job_id in ids:
        await api.wait_status(job_id, "succeeded", timeout=5)

    first = (await api.get("/jobs", params={"limit": 4})).json()
    second = (await api.get("/jobs", params={"limit": 4, "cursor": first["next_cursor"]})).json()
    failed = (await api.get("/jobs", params={"status": "failed"})).json()
    by_type = (await api.get("/jobs", params={"type": "demo.echo", "limit": 200})).json()

    listed = [j["id"] for j in first["items"] + second["items"]]
    assert listed == [failing, *reversed(ids)]
    assert second["next_cursor"] is None
    assert [j["id"] for j in failed["items"]] == [failing]
    assert len(by_type["items"]) == 6
    bad_cursor = await api.get("/jobs", params={"cursor": "garbage"})
    assert bad_cursor.status_code == 422
    bad_status = await api.get("/jobs", params={"status": "sleeping"})
    assert bad_status.status_code == 422


async def test_cancel_stops_a_running_job_at_its_next_checkpoint(api: ApiClient) -> None:
    job_id = await api.echo(sleep_ms=10_000)
    await api.wait_status(job_id, "running", timeout=5)

    response = await api.post(f"/jobs/{job_id}/cancel")

    assert response.status_code == 200
    assert response.json()["cancel_requested"] is True
    job = await api.wait_status(job_id, "cancelled", timeout=3)
    assert job["result"] is None


async def test_cancel_of_a_finished_job_is_a_409(api: ApiClient) -> None:
    job_id = await api.echo()
    await api.wait_status(job_id, "succeeded", timeout=5)

    response = await api.post(f"/jobs/{job_id}/cancel")

    assert response.status_code == 409
    assert "it is succeeded" in response.json()["error"]["message"]


async def test_redrive_runs_a_failed_job_again(api: ApiClient) -> None:
    job_id = await api.echo(fail_times=3)  # max_attempts is 3 here: the first round fails
    failed = await api.wait_status(job_id, "failed", timeout=5)
    assert failed["attempts"] == 3

    response = await api.post(f"/jobs/{job_id}/redrive")  # demo's key is an admin key

    assert response.status_code == 202
    assert response.json()["attempts"] == 0
    assert response.json()["dead_letters"].endswith(
        "stale dead letters removed (of the first 1000 in the DLQ)"
    )
    again = await api.wait_status(job_id, "failed", timeout=5)
    assert again["attempts"] == 3  # it ran a fresh round of attempts
    assert again["finished_at"] > failed["finished_at"]
    not_failed = await api.post(f"/jobs/{(await api.echo())}/redrive")
    assert not_failed.status_code == 409


async def test_the_openapi_schema_describes_every_route(api: ApiClient) -> None:
    schema = api.app.openapi()

    paths = schema["paths"]
    assert {"/health", "/ready", "/jobs", "/jobs/{job_id}", "/demo/echo"} <= set(paths)
    accepted = paths["/demo/echo"]["post"]["responses"]["202"]
    assert accepted["content"]["application/json"]["schema"]["$ref"].endswith("/JobAccepted")
    job = paths["/jobs/{job_id}"]["get"]["responses"]
    assert job["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/JobOut")
    assert job["404"]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")


async def test_the_routes_are_the_app_s_own_and_keep_what_their_router_gave_them(
    api: ApiClient,
) -> None:
    """The app adds its routers' routes as they are (jobrail.runtime.app.add_routes), so a
    request is matched once; each route still has its router's prefix, tags, route
    class and responses, and the order the app gave them."""
    routes = api.app.routes
    paths = [getattr(route, "path", None) for route in routes]
    echo = routes[paths.index("/demo/echo")]
    assert isinstance(echo, DishkaRoute)  # its router's route class
    assert echo.tags == ["demo"]
    assert "404" in {str(code) for code in echo.responses}
    assert paths.index("/jobs") < paths.index("/demo/echo") < paths.index("/ops")
    response = await api.post("/demo/echo", json={"message": "matched"})
    assert response.status_code == 202


async def test_a_router_with_a_lifespan_of_its_own_is_included_so_that_it_runs() -> None:
    started: list[str] = []

    @asynccontextmanager
    async def lifespan(_: object) -> AsyncIterator[None]:
        started.append("router")
        yield

    router = APIRouter(lifespan=lifespan)
    router.add_api_route("/ping", lambda: {"ok": True})
    app = FastAPI()
    add_routes(app, router)
    async with app.router.lifespan_context(app):
        assert started == ["router"]


async def test_unfinished_jobs_resume_after_an_embedded_restart(tmp_path: Path) -> None:
    settings = await migrated(
        embedded_settings(
            tmp_path,
            worker={"shutdown_grace_s": 0.2},
            jobs={"timeouts_s": {"demo.echo": 3}, "lease_grace_s": 0.2},
        )
    )
    first = create_app(settings, modules=REFERENCE)
    async with first.router.lifespan_context(first):
        client = ApiClient(transport=httpx.ASGITransport(app=first), base_url="http://api")
        client.sign_in_with("demo", "demo-key")
        job_id = await client.echo(sleep_ms=1500, message="interrupted")
        await client.wait_status(job_id, "running", timeout=5)
    # The process "stopped" mid-job: the job is still claimed by the dead attempt.
    second = create_app(settings, modules=REFERENCE)
    async with second.router.lifespan_context(second):
        client = ApiClient(transport=httpx.ASGITransport(app=second), base_url="http://api")
        client.sign_in_with("demo", "demo-key")
        assert (await client.job(job_id))["status"] == "running"
        job = await client.wait_status(job_id, "succeeded", timeout=15)

    assert job["result"] == {"echo": "interrupted"}
    assert job["attempts"] == 2


async def test_head_answers_as_get_without_the_body(api: ApiClient) -> None:
    job_id = (await api.post("/demo/echo", json={"message": "hi"})).json()["job_id"]
    await api.wait_status(job_id, "succeeded", timeout=5)  # no longer changing
    for path in ("/health", f"/jobs/{job_id}"):
        got = await api.get(path)
        head = await api.request("HEAD", path)
        assert head.status_code == got.status_code == 200, path
        assert head.content == b""
        assert head.headers["content-type"] == got.headers["content-type"]
        assert head.headers["content-length"] == str(len(got.content))

    missing = await api.request("HEAD", "/jobs/00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404
    assert missing.content == b""
    # The event feed's HEAD is a page's headers, not a stream that would never end.
    events = await asyncio.wait_for(
        api.request("HEAD", "/events", headers={"Accept": "text/event-stream"}), 5
    )
    assert events.status_code == 200
    assert events.headers["content-type"] == "application/json"
    refused = await api.request("HEAD", "/demo/echo")  # a POST route has no HEAD
    assert refused.status_code == 405
    assert refused.headers["allow"] == "OPTIONS, POST"


async def test_a_method_a_path_does_not_take_is_a_405_naming_every_method_it_does(
    api: ApiClient,
) -> None:
    """Starlette named only the first route that matched the path (`/webhooks`: POST)."""
    for path, allowed in [
        ("/webhooks", "GET, HEAD, OPTIONS, POST"),
        ("/billing/invoices", "GET, HEAD, OPTIONS, POST"),
        (f"/webhooks/{uuid.uuid4()}", "DELETE, GET, HEAD, OPTIONS"),
        ("/demo/echo", "OPTIONS, POST"),
    ]:
        refused = await api.put(path, json={})
        assert refused.status_code == 405, path
        assert refused.headers["allow"] == allowed, path
        assert refused.json()["error"]["code"] == "method_not_allowed"
        options = await api.options(path)
        assert options.status_code == 204, path
        assert options.headers["allow"] == allowed, path
    assert (await api.options("/no-such-route")).status_code == 404


async def test_an_embedded_shutdown_stops_a_running_job_without_an_error_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The job runs on the worker's own path (jobrail.transport.receiver): Taskiq's logged
    # every job stopped at shutdown as "Exception found while executing function." with
    # the CancelledError's traceback.
    # No housekeeping schedules: the one job running at shutdown is this test's.
    settings = await migrated(
        embedded_settings(tmp_path, worker={"shutdown_grace_s": 0.2}, scheduler={"embedded": False})
    )
    app = create_app(settings, modules=REFERENCE)
    async with app.router.lifespan_context(app):
        client = ApiClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
        client.sign_in_with("demo", "demo-key")
        job_id = await client.echo(sleep_ms=5000)
        await client.wait_status(job_id, "running", timeout=5)
        caplog.clear()

    assert "stopped 1 unfinished jobs at shutdown" in caplog.text
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_a_head_request_is_logged_with_its_route(
    api: ApiClient, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = await api.echo()
    with caplog.at_level(logging.DEBUG, logger="jobrail.api.access"):
        await api.request("HEAD", f"/jobs/{job_id}")

    assert "HEAD /jobs/{job_id} 200" in [r.getMessage() for r in caplog.records]
