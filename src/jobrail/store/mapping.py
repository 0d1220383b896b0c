"""Rows of the jobs table to and from the Job aggregate."""

from datetime import datetime
from typing import Any

from jobrail.jobs.domain import FlowLink, FlowRole, Job, JobStatus, Wait
from jobrail.jobs.priority import Priority
from jobrail.jobs.progress import JobProgress
from jobrail.kernel.ids import JobId, TenantId


def job_from_row(row: Any) -> Job:
    """From a SQLAlchemy RowMapping or an asyncpg Record."""
    return Job(
        id=JobId(row["id"]),
        type=row["type"],
        queue=row["queue"],
        tenant_id=TenantId(row["tenant_id"]),
        payload=row["payload"],
        max_attempts=row["max_attempts"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        status=JobStatus(row["status"]),
        attempts=row["attempts"],
        entity_id=row["entity_id"],
        idempotency_key=row["idempotency_key"],
        last_error=row["last_error"],
        result=row["result"],
        trace_context=row["trace_context"] or {},
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        run_after=row["run_after"],
        lease_until=row["lease_until"],
        cancel_requested=row["cancel_requested"],
        deadline=row["deadline"],
        unique_key=row["unique_key"],
        debounce_key=row["debounce_key"],
        held_since=row["held_since"],
        rank_at=row["rank_at"],
        priority=Priority(row["priority"]),
        fair_key=row["fair_key"],
        waiting=Wait.from_json(row["waiting"]),
        progress=progress_from_document(row["progress"]),
        flow=(
            None
            if row["flow_id"] is None
            else FlowLink(row["flow_id"], FlowRole(row["flow_role"]), row["flow_step"])
        ),
    )


def progress_document(progress: JobProgress) -> dict[str, Any]:
    """The progress column's JSON (written only by an attempt, see JobStore.write_progress)."""
    return {
        "current": progress.current,
        "total": progress.total,
        "message": progress.message,
        "updated_at": progress.updated_at.isoformat(),
    }


def progress_from_document(document: Any) -> JobProgress | None:
    if document is None:
        return None
    return JobProgress(
        current=document["current"],
        total=document["total"],
        message=document["message"],
        updated_at=datetime.fromisoformat(document["updated_at"]),
    )


def job_state(job: Job) -> dict[str, Any]:
    """The columns that change over a job's life."""
    return {
        "status": job.status.value,
        "attempts": job.attempts,
        "last_error": job.last_error,
        "result": job.result,
        "cancel_requested": job.cancel_requested,
        "updated_at": job.updated_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "run_after": job.run_after,
        "lease_until": job.lease_until,
        "waiting": None if job.waiting is None else job.waiting.as_json(),
    }


def job_row(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "tenant_id": job.tenant_id,
        "type": job.type,
        "queue": job.queue,
        "entity_id": job.entity_id,
        "idempotency_key": job.idempotency_key,
        "payload": job.payload,
        "max_attempts": job.max_attempts,
        "trace_context": job.trace_context,
        "created_at": job.created_at,
        "flow_id": None if job.flow is None else job.flow.flow_id,
        "flow_role": None if job.flow is None else job.flow.role.value,
        "flow_step": None if job.flow is None else job.flow.step,
        "deadline": job.deadline,
        "unique_key": job.unique_key,
        "debounce_key": job.debounce_key,
        "held_since": job.held_since,
        "rank_at": job.rank_at,
        "priority": int(job.priority),
        "fair_key": job.fair_key,
        **job_state(job),
    }
