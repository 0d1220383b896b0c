"""Fixtures on the real Postgres, RabbitMQ and Redis of this machine."""

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from jobrail.cli.schema import migrate
from jobrail.modules import Module
from jobrail.runtime.app import create_app
from jobrail.settings import RabbitSettings, Settings, load_settings
from jobrail.store.admin import create_database_if_missing, drop_database
from jobrail.transport.topology import Topology
from tests.support import pgbouncer
from tests.support.apps import REFERENCE
from tests.support.processes import Process, start_worker, stop_all
from tests.support.rabbit import RabbitProbe, remove_topology
from tests.support.services import AMQP_URL, PG_SERVER, REDIS_URL, require, wait_for


def _in_thread(function: Callable[..., Any], *args: Any) -> Any:
    """Run blocking set-up code even when the caller is inside an event loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(function, *args).result()


@pytest.fixture(scope="session")
def direct_database_url() -> str:
    """The session's database (see ``database_url``), reached directly: for the tests' own
    reads and writes, also when jobrail's go through PgBouncer (TESTS_PGBOUNCER=1)."""
    require("postgres")
    return f"{PG_SERVER}/jobrail_test_{os.getpid()}"


@pytest.fixture(scope="session")
def database_url(direct_database_url: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A database of this test session's own, migrated with Alembic, dropped at the end:
    the URL jobrail's apps, workers and CLI are given. With TESTS_PGBOUNCER=1 that is
    PgBouncer's, in transaction mode: the database is created and migrated through it."""
    url = direct_database_url
    if pgbouncer.enabled():
        bouncer: pgbouncer.PgBouncer = request.getfixturevalue("pgbouncer")
        url = bouncer.url(make_url(direct_database_url).database or "")
    database = {"url": url, "pooler": "transaction" if pgbouncer.enabled() else "none"}
    _in_thread(asyncio.run, drop_database(direct_database_url))
    _in_thread(asyncio.run, create_database_if_missing(url))
    _in_thread(migrate, Settings(database=database), REFERENCE)  # type: ignore[arg-type]
    yield url
    _in_thread(asyncio.run, drop_database(direct_database_url))


@pytest.fixture
async def engine(direct_database_url: str, database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(direct_database_url)
    async with engine.begin() as conn:
        # Every table but the chains' version tables: the platform's and every context's.
        tables = (
            await conn.execute(
                text(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                    "AND tablename NOT LIKE '%alembic_version'"
                )
            )
        ).scalars()
        await conn.execute(text(f"TRUNCATE {', '.join(tables)}"))
    yield engine
    await engine.dispose()


# TESTS_FAIR_DISPATCH=1 runs the stack tests with fair dispatch on in the apps and the
# processes they start (the tests never read JOBRAIL_* from the shell): a test that sets
# JOBRAIL_DISPATCH__ENABLED itself keeps its own.
_FAIR_DISPATCH = (
    {"JOBRAIL_DISPATCH__ENABLED": "true"} if os.environ.get("TESTS_FAIR_DISPATCH") == "1" else {}
)


@pytest.fixture
def stack_env(database_url: str, engine: AsyncEngine) -> Iterator[dict[str, str]]:
    """Settings (as environment) of a stack-mode process with its own queue names.

    Whatever the test did, its queues and exchanges are deleted afterwards: every
    quorum queue left behind holds files and memory in RabbitMQ, and a few hundred
    of them exhaust its file handles for every later test."""
    require("rabbitmq")
    prefix = f"t{uuid.uuid4().hex[:8]}."
    yield _FAIR_DISPATCH | {
        "JOBRAIL_APP": "workers.app:rail",
        "JOBRAIL_MODE": "stack",
        "JOBRAIL_ENVIRONMENT": "test",
        "JOBRAIL_DATABASE__URL": database_url,
        # TESTS_PGBOUNCER=1: database_url is PgBouncer's, in transaction mode.
        "JOBRAIL_DATABASE__POOLER": "transaction" if pgbouncer.enabled() else "none",
        "JOBRAIL_RABBIT__URL": AMQP_URL,
        "JOBRAIL_RABBIT__PREFIX": prefix,
        "JOBRAIL_REDIS__URL": REDIS_URL,
        "JOBRAIL_REDIS__KEY_PREFIX": f"{prefix}jobrail:",
        "JOBRAIL_RETRY__BASE_S": "0.2",
        "JOBRAIL_RETRY__JITTER": "none",
        "JOBRAIL_OUTBOX__RELAY_MIN_AGE_S": "0.5",
        "JOBRAIL_OUTBOX__RELAY_INTERVAL_S": "0.2",
        "JOBRAIL_JOBS__LEASE_GRACE_S": "1",
        "JOBRAIL_JOBS__STORE_RETRY_MAX_S": "0.5",
        "JOBRAIL_WORKER__SHUTDOWN_GRACE_S": "10",
    }
    _in_thread(asyncio.run, remove_topology(Topology.from_settings(RabbitSettings(prefix=prefix))))


def settings_from(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings()
    for key in env:
        monkeypatch.delenv(key)
    return settings


@pytest.fixture
def stack_settings(stack_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    return settings_from(stack_env, monkeypatch)


@pytest.fixture
async def rabbit(stack_settings: Settings) -> AsyncIterator[RabbitProbe]:
    async with RabbitProbe(Topology.from_settings(stack_settings.rabbit)) as probe:
        yield probe
        await probe.delete_topology()


class ApiClient(httpx.AsyncClient):
    """An HTTP client of an in-process app, signed in as a tenant (``tenant_id``)."""

    app: Any = None
    tenant_id: str = "default"

    async def key_for(self, tenant: str, *, admin: bool = False) -> str:
        """A fresh API key of `tenant`, creating the tenant the first time."""
        from jobrail.kernel.errors import ConflictError
        from jobrail.kernel.ids import TenantId
        from jobrail.runtime.app import runtime_of
        from jobrail.tenants.use_cases import CreateTenant, IssueApiKey

        container = runtime_of(self.app).container
        try:
            issued = await (await container.get(CreateTenant))(tenant, admin=admin)
        except ConflictError:
            issued = await (await container.get(IssueApiKey))(TenantId(tenant))
        return issued.api_key

    async def auth(self, tenant: str, *, admin: bool = False) -> dict[str, str]:
        """Headers that authenticate as `tenant`."""
        return {"Authorization": f"Bearer {await self.key_for(tenant, admin=admin)}"}

    async def sign_in(self, tenant: str, *, admin: bool = False) -> "ApiClient":
        """Make `tenant` the one every request of this client acts for."""
        self.headers.update(await self.auth(tenant, admin=admin))
        self.tenant_id = tenant
        return self

    def sign_in_with(self, tenant: str, key: str) -> "ApiClient":
        self.headers["Authorization"] = f"Bearer {key}"
        self.tenant_id = tenant
        return self

    async def enqueue(
        self, job_type: str, payload: dict[str, Any], tenant: str | None = None
    ) -> str:
        """Enqueue any job type through the EnqueueJob use case of the running app."""
        from jobrail.jobs.enqueue import EnqueueJob, EnqueueJobCommand
        from jobrail.kernel.ids import TenantId
        from jobrail.runtime.app import runtime_of

        async with runtime_of(self.app).container() as request:
            enqueue = await request.get(EnqueueJob)
            result = await enqueue(
                EnqueueJobCommand(
                    tenant_id=TenantId(tenant or self.tenant_id), type=job_type, payload=payload
                )
            )
        return str(result.job.id)

    async def job(self, job_id: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
        response = await self.get(f"/jobs/{job_id}", headers=headers)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def echo(self, headers: dict[str, str] | None = None, **payload: Any) -> str:
        payload.setdefault("message", "hello")
        response = await self.post("/demo/echo", json=payload, headers=headers or {})
        assert response.status_code == 202, response.text
        job_id: str = response.json()["job_id"]
        return job_id

    async def wait_status(
        self,
        job_id: str,
        *statuses: str,
        timeout: float = 15,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        async def reached() -> dict[str, Any] | None:
            job = await self.job(job_id, headers)
            return job if job["status"] in statuses else None

        result: dict[str, Any] = await wait_for(
            reached, timeout=timeout, what=f"job {job_id} to be {'/'.join(statuses)}"
        )
        return result


@pytest.fixture
def make_api() -> Callable[[Settings], Any]:
    """An in-process API for the given settings, lifespan and all: the reference
    application, or the modules given (those of the JobRail its workers run)."""

    def factory(settings: Settings, modules: Sequence[Module] = REFERENCE) -> Any:
        class Running:
            async def __aenter__(self) -> ApiClient:
                self.app = create_app(settings, modules=modules)
                self.lifespan = self.app.router.lifespan_context(self.app)
                await self.lifespan.__aenter__()
                self.client = ApiClient(
                    transport=httpx.ASGITransport(app=self.app), base_url="http://api"
                )
                self.client.app = self.app
                return await self.client.sign_in("default")

            async def __aexit__(self, *exc: object) -> None:
                await self.client.aclose()
                await self.lifespan.__aexit__(None, None, None)

        return Running()

    return factory


@pytest.fixture
async def api(
    stack_settings: Settings, rabbit: RabbitProbe, make_api: Callable[[Settings], Any]
) -> AsyncIterator[ApiClient]:
    async with make_api(stack_settings) as client:
        yield client


@pytest.fixture
def worker_env(stack_env: dict[str, str]) -> dict[str, str]:
    """The settings workers start with; a test module may override this fixture."""
    return stack_env


@pytest.fixture
def workers(worker_env: dict[str, str], rabbit: RabbitProbe) -> Iterator[Callable[..., Any]]:
    """Start worker processes (`jobrail worker`); each is stopped at teardown."""
    started: list[Process] = []

    async def start(name: str = "worker", **extra_env: str) -> Process:
        process = start_worker({**worker_env, **extra_env}, name=name)
        started.append(process)
        queue = rabbit.topology.queues["jobs.default"]

        async def consuming() -> bool:
            if not process.alive():
                raise AssertionError(f"{name} exited:\n{process.output()[-3000:]}")
            try:
                _, consumers = await rabbit.depth(queue)
            except Exception:
                return False
            return consumers >= len([p for p in started if p.alive()])

        await wait_for(consuming, timeout=30, interval=0.2, what=f"{name} to consume")
        return process

    yield start
    stop_all(started)
    # Shown by pytest only when the test failed: what each worker said (a job that
    # never finished leaves its reason here, if anywhere).
    for process in started:
        print(f"--- {process.name} (last 4000 characters of its output):")
        print(process.output()[-4000:] or "(nothing)")
