"""Running jobs: retries and their backoff, a job's timeout, lease and result, and the
worker process that runs them (its queues, its concurrency, its batches)."""

from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import NoDecode

from jobrail.settings.values import PositiveFloat, PositiveInt, comma_list


class RetrySettings(BaseModel):
    """Backoff for transient failures: ``min(cap, base * 2**attempt) * random()``."""

    base_s: PositiveFloat = 1.0
    cap_s: PositiveFloat = 300.0
    max_attempts: PositiveInt = 5
    max_attempts_unknown: PositiveInt = Field(
        default=3, description="Attempts for errors that are neither transient nor permanent."
    )
    jitter: Literal["full", "none"] = "full"


class JobsSettings(BaseModel):
    default_timeout_s: PositiveFloat = 60.0
    timeouts_s: dict[str, PositiveFloat] = Field(
        default_factory=dict, description="Per job type timeout overrides, by job type name."
    )
    lease_grace_s: PositiveFloat = Field(
        default=10.0,
        description="A job whose timeout + this is shorter than lease_s claims that much, "
        "unrenewed: how long past its timeout it stays claimed if its worker dies.",
    )
    lease_s: PositiveFloat = Field(
        default=6.0,
        description="Every claim lasts this long (or timeout + grace if shorter), renewed "
        "every third of it while the job runs: a worker that dies mid-job leaves its jobs "
        "to be taken over about this long after its death, whatever the backlog. Jobs "
        "shorter than a third of it never renew.",
    )
    store_retry_max_s: PositiveFloat = Field(
        default=5.0, description="Cap of the backoff while the database is unreachable."
    )
    max_result_bytes: PositiveInt = Field(
        default=64 * 1024,
        description="A job whose handler returns a larger result (UTF-8 JSON) fails, "
        "permanently, saying so: results are small JSON, not blobs.",
    )
    progress_interval_ms: PositiveInt = Field(
        default=250,
        description="A running job writes its progress reports (ctx.progress) at most "
        "once per this: the first at once, then the latest at the end of each interval, "
        "and the last before its outcome.",
    )


class WorkerSettings(BaseModel):
    queues: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Queues this worker consumes; empty means all."
    )
    processes: PositiveInt = 1
    max_async_tasks: PositiveInt = 128
    # 2 ms made larger batches (about 10% less CPU per no-op job in the bench), but on a
    # loaded machine it spread the time from a job's admission to its side effect enough
    # that a fleet held to a rate limit made up to one call too many in some window
    # (tests/integration/test_limits_jobs.py, the fleet test, under a CPU hog); 1 ms kept it.
    batch_window_ms: Annotated[float, Field(ge=0, le=50)] = Field(
        default=1.0,
        description="How long a worker gathers Redis and Postgres calls into one batch "
        "(each of a job's four calls waits at most this long; 0: no wait).",
    )
    wave_size: Annotated[int, Field(ge=1, le=256)] = Field(
        default=32,
        description="While at least this many jobs run, a worker starts new deliveries in "
        "waves of this many: the first waits up to wave_wait_ms for the others, so that "
        "each wave is admitted, claimed and recorded with one call each.",
    )
    wave_wait_ms: Annotated[float, Field(ge=0, le=100)] = Field(
        default=10.0,
        description="How long a busy worker holds a delivery for its wave to fill "
        "(0: never; an idle worker never holds one).",
    )
    shutdown_grace_s: PositiveFloat = 30.0
    beat_interval_s: Annotated[float, Field(ge=0.1, le=300)] = Field(
        default=5.0,
        description="How often each worker process (and the embedded runtime) writes its "
        "beat to the workers table; one that misses three beats shows as gone.",
    )

    _split_queues = field_validator("queues", mode="before")(comma_list)
