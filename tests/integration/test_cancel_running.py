"""Cancelling a running job on the real services stops its handler in whichever of two
worker processes runs it, however the handler waits."""

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from jobrail.settings import Settings
from tests.support.apps import reference_and_test_jobs
from tests.support.cancel_jobs import Way
from tests.support.cancelling import cancel_running, silent_server
from tests.support.fixtures import ApiClient
from tests.support.rabbit import RabbitProbe

APP = "tests.support.apps:reference_and_test_jobs"


@pytest.fixture
def worker_env(stack_env: dict[str, str]) -> dict[str, str]:
    return {**stack_env, "JOBRAIL_APP": APP}


@pytest.fixture
async def api(
    stack_settings: Settings, rabbit: RabbitProbe, make_api: Callable[..., Any]
) -> AsyncIterator[ApiClient]:
    async with make_api(stack_settings, reference_and_test_jobs.modules) as client:
        yield client


@pytest.fixture
async def two_workers(workers: Callable[..., Any]) -> None:
    await asyncio.gather(workers("w1"), workers("w2"))  # started together


@pytest.mark.usefixtures("two_workers")
@pytest.mark.parametrize("way", ["spin", "sleep", "shielded"])
async def test_a_running_job_that_never_checkpoints_is_stopped_by_its_cancel(
    api: ApiClient, tmp_path: Path, way: Way
) -> None:
    await cancel_running(api, tmp_path, way)


@pytest.mark.usefixtures("two_workers")
async def test_a_job_waiting_on_an_http_call_is_stopped_by_its_cancel(
    api: ApiClient, tmp_path: Path
) -> None:
    with silent_server() as url:
        await cancel_running(api, tmp_path, "http", url)
