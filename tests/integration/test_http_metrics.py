"""The API's HTTP server series and every process's standard process series, as
``GET /metrics`` serves them."""

import asyncio
import uuid
from pathlib import Path

from tests.integration.test_metrics import _embedded, _embedded_client, _scrape_api


async def test_requests_are_counted_and_timed_by_route_template_and_status(
    tmp_path: Path,
) -> None:
    settings = await asyncio.to_thread(_embedded, tmp_path)
    async with _embedded_client(settings) as api:
        job_id = await api.echo(message="hi")
        await api.wait_status(job_id, "succeeded")
        before = await _scrape_api(api)
        route = {"method": "GET", "route": "/jobs/{job_id}"}
        ok = before.value("jobrail_http_requests_total", status="200", **route)

        # Three reads of one job, two of jobs that do not exist, one made-up path.
        for _ in range(3):
            assert (await api.get(f"/jobs/{job_id}")).status_code == 200
        for _ in range(2):
            assert (await api.get(f"/jobs/{uuid.uuid4()}")).status_code == 404
        assert (await api.get(f"/no-such-page/{uuid.uuid4()}")).status_code == 404
        scrape = await _scrape_api(api)

        assert scrape.value("jobrail_http_requests_total", status="200", **route) == ok + 3
        assert scrape.value("jobrail_http_requests_total", status="404", **route) == 2
        unmatched = {"method": "GET", "route": "_unmatched", "status": "404"}
        assert scrape.value("jobrail_http_requests_total", **unmatched) == 1
        timed = {"status_class": "2xx", **route}
        assert scrape.value("jobrail_http_request_duration_seconds_count", **timed) == ok + 3
        # No raw path, hence no id, ever becomes a label value.
        values = scrape.label_values()
        assert not any(job_id in value or "/no-such-page" in value for value in values)


async def test_every_process_serves_its_process_and_runtime_series(tmp_path: Path) -> None:
    settings = await asyncio.to_thread(_embedded, tmp_path)
    async with _embedded_client(settings) as api:
        scrape = await _scrape_api(api)

        assert scrape.value("process_resident_memory_bytes") > 0
        assert scrape.value("process_open_fds") > 0
        assert scrape.has("process_cpu_seconds_total")
        assert scrape.has("python_gc_collections_total", generation="0")
        assert scrape.has("python_info")
