"""Poison messages go to jobs.dlq with their reason, and the consumers keep consuming."""

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from jobrail.kernel.ids import JobId
from jobrail.store.tables import jobs
from tests.faults.conftest import job_counts
from tests.support.fixtures import ApiClient
from tests.support.rabbit import DeadLetter, RabbitProbe
from tests.support.services import wait_for
from tests.support.wire import job_envelope


def _message(task: str, job_id: object, **labels: object) -> bytes:
    body = {"task_id": uuid.uuid4().hex, "task_name": task, "labels": labels, "args": []}
    body["kwargs"] = {"job_id": str(job_id)}
    return json.dumps(body).encode()


async def _job_with_payload(
    engine: AsyncEngine, payload: dict[str, Any], job_type: str = "demo.echo"
) -> uuid.UUID:
    """A job row as an older release (or a hand edit) might have left it."""
    job_id = uuid.uuid4()
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        await conn.execute(
            insert(jobs).values(
                id=job_id,
                tenant_id="default",
                type=job_type,
                queue="jobs.default",
                status="pending",
                payload=payload,
                attempts=0,
                max_attempts=3,
                trace_context={},
                created_at=now,
                updated_at=now,
            )
        )
    return job_id


def _reason_naming(reasons: dict[bytes, str], job_id: object) -> str:
    """The reason of the one dead letter whose message names the job (the worker
    dead-letters a job's own message, not the bytes it received)."""
    [reason] = [reason for body, reason in reasons.items() if str(job_id).encode() in body]
    return reason


async def test_poison_is_dead_lettered_with_its_reason_and_work_goes_on(
    api: ApiClient, workers: Any, rabbit: RabbitProbe, engine: AsyncEngine, report: Any
) -> None:
    await workers()
    queue = rabbit.topology.queues["jobs.default"]
    invalid = await _job_with_payload(engine, {"message": 42, "sleep_ms": "long"})
    # A job of a type no worker here has (enqueued by a newer release, say).
    newer = await _job_with_payload(engine, {}, job_type="no.such_task")
    missing = uuid.uuid4()
    victim = await api.echo(message="someone else's", headers=await api.auth("acme"))
    # A job of a type without limits, named by a message of a type with them: its keys
    # would be made from a payload of another shape.
    echo_job = await _job_with_payload(engine, {"message": "not an account"})
    lone_surrogate = json.loads(_message("demo.echo", uuid.uuid4(), tenant_id="default"))
    lone_surrogate["task_id"] = "\ud800"
    poison = {
        # Arrays nested past Python's recursion limit: 2.4 KB that stopped the consumer.
        "nested too deeply": b"[" * 1200 + b"]" * 1200,
        "lone surrogate": json.dumps(lone_surrogate).encode(),
        "a limited type naming another type's job": _message(
            "sync.account", echo_job, tenant_id="default", queue_name="jobs.default"
        ),
        "pickle, not JSON": b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00}\x94.",
        "JSON, not a job": b'{"hello": "world"}',
        "unknown task": _message("no.such_task", newer, tenant_id="default"),
        "unknown task, no such job": _message("no.such_task", missing, tenant_id="default"),
        "bad label": _message("demo.echo", uuid.uuid4(), tenant_id="default", deferrals="x"),
        "payload fails validation": _message(
            "demo.echo", invalid, tenant_id="default", queue_name="jobs.default"
        ),
        "names another tenant's job": job_envelope(
            job_id=JobId(uuid.UUID(victim)),
            job_type="demo.echo",
            queue="jobs.default",
            tenant_id="default",
        ).body,
    }
    for body in poison.values():
        await rabbit.publish_raw(queue, body)
    after = await api.echo(message="still consuming")

    dead: list[DeadLetter] = []

    async def all_dead() -> bool:
        dead.extend(await rabbit.drain(rabbit.topology.dead_letter_queue))
        return len(dead) >= len(poison)

    await wait_for(all_dead, timeout=20, what="every poison message in the DLQ")
    await api.wait_status(after, "succeeded")
    failed = await api.wait_status(str(invalid), "failed")
    unknown = await api.wait_status(str(newer), "failed")
    victim_job = await api.job(victim, await api.auth("acme"))

    reasons = {bytes(d.body): str(d.headers["x-jobrail-reason"]) for d in dead}
    assert reasons[poison["pickle, not JSON"]].startswith("malformed message: body is not JSON")
    assert reasons[poison["JSON, not a job"]] == "malformed message: task_name is missing"
    # A job of an unknown type fails with why (its status no longer says pending), and
    # its message waits in the DLQ to be redriven once a worker knows the type.
    assert "no worker here runs job type 'no.such_task'" in _reason_naming(reasons, newer)
    assert unknown["last_error"] == _reason_naming(reasons, newer)
    assert unknown["attempts"] == 1
    assert _reason_naming(reasons, missing) == f"job {missing} does not exist"
    assert reasons[poison["bad label"]] == (
        "malformed message: label deferrals must be a whole number >= 0"
    )
    # The job whose payload no longer validates fails at once, dead-lettered with why.
    assert "message" in _reason_naming(reasons, invalid)
    assert failed["attempts"] == 1
    assert "valid" in failed["last_error"]
    assert reasons[poison["nested too deeply"]] == (
        "malformed message: body is not JSON the worker reads: nested too deeply"
    )
    assert reasons[poison["lone surrogate"]] == (
        "malformed message: body holds a lone surrogate escape (not text)"
    )
    assert "does not match job" in _reason_naming(reasons, echo_job)
    # A message naming another tenant's job never runs it.
    assert "does not match job" in _reason_naming(reasons, victim)
    assert victim_job["attempts"] <= 1
    assert {d.headers["x-jobrail-source-queue"] for d in dead} == {"jobs.default"}
    assert len(dead) == len(poison)  # nothing else was dead-lettered
    counts = await job_counts(engine)
    report(
        scenario="poison messages",
        jobs=sum(counts.values()),
        succeeded=counts.get("succeeded", 0),
        lost=0,
        duplicated=0,
        redeliveries_absorbed=0,
        recover_s=0,
        notes=f"{len(poison)} dead-lettered with reasons: " + "; ".join(poison),
    )
