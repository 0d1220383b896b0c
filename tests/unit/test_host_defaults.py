"""What a host's JobRail gets by default, decided without I/O: no demo module and no demo
tenant unless the app asks for them (the reference application does), the include_object
filter that keeps jobrail's tables out of a host's Alembic autogenerate, and the job
lines a host's own logging receives."""

import logging
from datetime import timedelta
from pathlib import Path

import pytest
from pydantic import BaseModel
from sqlalchemy import Column, Index, Integer, MetaData, String, Table

from jobrail import JobContext, JobRail
from jobrail.jobs.messages import JobMessage
from jobrail.jobs.retry import RetryPolicy
from jobrail.limits.model import JobLimits
from jobrail.runtime.bootstrap import seeds_demo_tenant
from jobrail.runtime.modules import with_default_modules
from jobrail.settings import Settings, load_settings
from jobrail.store.schema import PLATFORM, IncludeObject, MigrationChain, exclude_chains
from jobrail.worker.outcomes import Next, Verdict, conclude
from tests.fakes import START, make_job


def _embedded(tmp_path: Path, **values: object) -> Settings:
    url = f"sqlite+aiosqlite:///{tmp_path}/jobrail.db"
    return Settings(mode="embedded", database={"url": url}, **values)  # type: ignore[arg-type]


# -- the demo: a sandbox's, not a host's ---------------------------------------------------


def test_a_host_rail_loads_no_demo_unless_its_app_or_the_environment_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("JOBRAIL_MODULES", raising=False)
    assert load_settings().modules == ["demo"]  # jobrail's own processes, without an app
    assert JobRail().settings.modules == []
    assert JobRail(default_modules=["demo"]).settings.modules == ["demo"]  # workers.app

    monkeypatch.setenv("JOBRAIL_MODULES", "")
    assert JobRail(default_modules=["demo"]).settings.modules == []
    monkeypatch.setenv("JOBRAIL_MODULES", "demo")
    assert JobRail().settings.modules == ["demo"]


def test_settings_given_to_a_rail_take_its_default_only_where_they_name_no_modules(
    tmp_path: Path,
) -> None:
    assert JobRail(_embedded(tmp_path)).settings.modules == []
    assert JobRail(_embedded(tmp_path, modules=["demo"])).settings.modules == ["demo"]
    assert with_default_modules(_embedded(tmp_path), ["demo"]).modules == ["demo"]
    assert with_default_modules(_embedded(tmp_path, modules=[]), ["demo"]).modules == []
    production = Settings(mode="stack", environment="production")
    assert with_default_modules(production, ["demo"]).modules == []


def test_the_demo_tenant_is_seeded_only_where_the_demo_is_loaded(tmp_path: Path) -> None:
    assert seeds_demo_tenant(_embedded(tmp_path))  # Settings' own default: the sandbox
    assert seeds_demo_tenant(_embedded(tmp_path, modules=["demo"]))
    assert not seeds_demo_tenant(_embedded(tmp_path, modules=[]))
    assert not seeds_demo_tenant(JobRail(_embedded(tmp_path)).settings)
    assert not seeds_demo_tenant(Settings(mode="stack", modules=["demo"]))


class Report(BaseModel):
    report_id: str


def test_a_worker_loads_a_host_module_that_mounted_the_rails_app(tmp_path: Path) -> None:
    # `jobrail worker --app` imports the host's module, whose app.mount("/jobrail",
    # rail.app()) built the API's runtime: the worker builds its own, as a worker.
    rail = JobRail(_embedded(tmp_path, modules=[]))

    @rail.job("reports.render", payload=Report)
    async def render(payload: Report, ctx: JobContext) -> None:
        return None

    rail.app()
    runtime = rail.build(worker=True)

    assert rail.runtime is runtime
    assert runtime.registry.get("reports.render") is not None
    assert runtime.broker.is_worker_process


# -- the host's Alembic autogenerate ---------------------------------------------------------


def _table(name: str, schema: str | None = None) -> Table:
    return Table(name, MetaData(), Column("id", Integer, primary_key=True), schema=schema)


def _keeps(include: IncludeObject, thing: Table | Index, type_: str = "table") -> bool:
    return include(thing, str(thing.name), type_, True, None)


def test_the_filter_leaves_out_the_platforms_tables_and_version_table_only() -> None:
    include = exclude_chains()
    jobs = _table("jobs")

    assert not _keeps(include, jobs)
    assert not _keeps(include, _table("tenants"))
    assert not _keeps(include, _table(PLATFORM.version_table))
    assert not _keeps(include, Index("ix_jobs_id", jobs.c.id), "index")
    assert _keeps(include, _table("reports"))
    assert _keeps(include, _table("alembic_version"))  # the host's own chain's


def test_the_filter_leaves_out_a_modules_chain_that_names_its_metadata(tmp_path: Path) -> None:
    (tmp_path / "env.py").write_text("")
    tables = MetaData()
    Table("invoices", tables, Column("id", String(8), primary_key=True))
    chain = MigrationChain("billing", tmp_path, "billing_alembic_version", metadata=tables)

    include = exclude_chains([chain])

    assert not _keeps(include, _table("invoices"))
    assert not _keeps(include, _table("billing_alembic_version"))
    assert not _keeps(include, _table("jobs"))
    assert _keeps(include, _table("reports"))


def test_with_a_platform_schema_a_host_table_of_the_same_name_is_the_hosts() -> None:
    include = exclude_chains(schema="jobrail")

    assert not _keeps(include, _table("jobs", schema="jobrail"))
    assert not _keeps(include, _table(PLATFORM.version_table, schema="jobrail"))
    assert _keeps(include, _table("jobs"))  # public.jobs: the host's own
    assert _keeps(include, _table("reports"))


# -- a job's retry in the host's logs -----------------------------------------------------


def test_a_retry_and_a_failure_are_each_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    # The runner recorded them in the job's row alone: a host (and a worker's log) saw
    # nothing of a job that failed and was retried.
    policy = RetryPolicy(base_s=2.0, cap_s=60.0, jitter=False)
    for max_attempts in (2, 1):
        job = make_job(type="reports.render", max_attempts=max_attempts)
        job.start(START, timedelta(seconds=30))
        conclude(
            job,
            Verdict(Next.RETRY, "TransientError: the vendor is down"),
            now=START,
            policy=policy,
            cancel_requested=False,
            limits=JobLimits(),
            delivery=JobMessage.of(job),
            dead_letter_queue="jobs.dlq",
        )

    retry, failure = [r for r in caplog.records if r.name == "jobrail.runner"]
    assert retry.levelno == failure.levelno == logging.WARNING
    assert retry.getMessage().endswith(
        "(reports.render): attempt 1 failed (TransientError: the vendor is down); retrying in 2.0s"
    )
    assert failure.getMessage().endswith(
        "(reports.render) failed: TransientError: the vendor is down (gave up after 1 attempts)"
    )
