"""`jobrail worker --app pkg.module:rail`: a worker process runs the job types a host
declared on its JobRail, enqueued by the host's own rail (on their own or in its
session); a path that names no JobRail stops the command in one line."""

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from jobrail import JobRail
from jobrail.jobs.domain import Job
from jobrail.jobs.get import GetJob, GetJobQuery
from jobrail.kernel.ids import JobId, TenantId
from jobrail.settings import Settings
from tests.support.host_app import RenderReport, declare_jobs
from tests.support.processes import BIN, ROOT, Process
from tests.support.rabbit import RabbitProbe
from tests.support.services import wait_for

pytestmark = pytest.mark.integration

APP = "tests.support.host_worker:rail"
# The same job types, from a module whose import starts a thread.
THREADED_APP = "tests.support.host_threaded:rail"


@pytest.fixture(params=[APP, THREADED_APP])
async def host_worker(
    request: pytest.FixtureRequest, stack_env: dict[str, str], rabbit: RabbitProbe
) -> AsyncIterator[Process]:
    process = Process(
        [str(BIN / "jobrail"), "worker", "--app", request.param],
        {**stack_env, "JOBRAIL_MODULES": ""},
        "host-worker",
    )
    queue = rabbit.topology.queues["jobs.default"]

    async def consuming() -> bool:
        if not process.alive():
            raise AssertionError(f"the worker exited:\n{process.output()[-3000:]}")
        try:
            _, consumers = await rabbit.depth(queue)
        except Exception:  # not declared yet
            return False
        return consumers >= 1

    try:
        await wait_for(consuming, timeout=30, interval=0.2, what="the host's worker to consume")
        yield process
    finally:
        process.stop()


async def finished(rail: JobRail, job_id: JobId) -> Job:
    async def done() -> Job | None:
        async with rail.container() as scope:
            job = await (await scope.get(GetJob))(
                GetJobQuery(tenant_id=TenantId("acme"), job_id=job_id)
            )
        return job if job.finished_at is not None else None

    result: Job = await wait_for(done, timeout=20, what=f"job {job_id} to finish")
    return result


async def test_the_worker_runs_the_host_job_types(
    stack_settings: Settings, engine: AsyncEngine, host_worker: Process
) -> None:
    rail = JobRail(stack_settings.model_copy(update={"modules": []}))
    render = declare_jobs(rail)
    sessions = async_sessionmaker(engine)

    async with rail.lifespan():
        alone = await render.enqueue(RenderReport(report_id="r-1", pages=2), tenant_id="acme")
        async with sessions() as session:
            in_session = await render.enqueue(
                RenderReport(report_id="r-2"), tenant_id="acme", session=session
            )
            await session.commit()
        failing = await render.enqueue(
            RenderReport(report_id="r-3", permanent_failure=True), tenant_id="acme"
        )
        jobs = [await finished(rail, result.job.id) for result in (alone, in_session, failing)]

    assert [(job.status.value, job.result) for job in jobs] == [
        ("succeeded", {"pages": 2, "attempt": 1}),
        ("succeeded", {"pages": 1, "attempt": 1}),
        ("failed", None),
    ]
    assert jobs[2].last_error is not None
    assert "cannot be rendered" in jobs[2].last_error


async def test_the_worker_forks_its_processes_unless_the_host_runs_a_thread(
    host_worker: Process, request: pytest.FixtureRequest
) -> None:
    # The supervisor is `jobrail worker` itself, which forks the worker processes with
    # the application imported; a host whose import started a thread gets Taskiq's own
    # worker command instead (forking a process that runs a thread is not safe).
    supervisor = Path(f"/proc/{host_worker.pid}/cmdline").read_bytes().split(b"\0")
    children = Path(f"/proc/{host_worker.pid}/task/{host_worker.pid}/children").read_text()

    if request.node.callspec.params["host_worker"] == APP:
        assert supervisor[1:3] == [str(BIN / "jobrail").encode(), b"worker"], supervisor
    else:
        assert supervisor[1:4] == [b"-m", b"taskiq", b"worker"], supervisor
    assert len(children.split()) == 1  # one worker process (JOBRAIL_WORKER__PROCESSES)


@pytest.mark.parametrize(
    ("path", "says"),
    [
        ("tests.support.no_such_module:rail", "cannot be imported"),
        ("tests.support.host_worker:not_a_rail", "is not a JobRail (object)"),
        ("tests.support.host_worker:missing", "is not a JobRail (missing)"),
        ("tests.support.host_worker", "pkg.module:attribute"),
    ],
)
@pytest.mark.parametrize("command", ["worker", "scheduler"])
def test_an_app_path_that_names_no_rail_is_one_line(
    stack_env: dict[str, str], command: str, path: str, says: str
) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRAIL_")}
    done = subprocess.run(
        [str(BIN / "jobrail"), command, "--app", path],
        cwd=ROOT,
        env={**env, **stack_env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 2
    assert done.stderr.startswith("jobrail: --app")
    assert says in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["worker", "scheduler"])
def test_a_rail_whose_job_type_the_settings_refuse_is_one_line_before_anything_starts(
    stack_env: dict[str, str], command: str
) -> None:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRAIL_")}
    done = subprocess.run(
        [str(BIN / "jobrail"), command, "--app", "tests.support.host_bad_queue:rail"],
        cwd=ROOT,
        env={**env, **stack_env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("jobrail: ")
    assert "jobs.nope" in line
