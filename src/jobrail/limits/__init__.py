"""Rate limits, concurrency slots and renewable locks for jobs and for the API.

Why jobrail's own Lua rather than ``limits``, throttled-py or redis-py's ``Lock``:
a job needs all of its limits *and* its lock at once or none of them, in one round
trip. Those libraries check one limiter per call (so a job limited by a vendor
budget and an account lock costs several round trips and can spend a token it
then cannot use), and redis-py's ``Lock`` has no fencing token. Here one script
evaluates every limit a job declares and applies them only if all pass; a second
releases them; a third renews the lock and the slot leases while the job runs.

Declare limits on a job type::

    @job(
        "sync.account",
        payload=SyncPayload,
        limits=[
            TokenBucket("vendor", key="vendor:{tenant_id}", capacity=10, per_second=5),
            Concurrency("vendor-connections", key="vendor:{tenant_id}", slots=3),
        ],
        lock=Lock(key="account:{tenant_id}:{account_id}", ttl_s=30),
    )
    async def sync_account(payload: SyncPayload, ctx: JobContext) -> None: ...

Keys are filled from the payload's fields and the job's ``tenant_id``; a template
naming a field the payload does not have stops the process at start-up. The part of
a key after its first ':' is its owner, which decides its Redis Cluster slot: a job's
keys must agree on it when Redis is a cluster (see ``model.hash_tagged``).
"""

from jobrail.limits.model import (
    Concurrency,
    JobLimits,
    LimitsUnavailableError,
    Lock,
    SlidingWindow,
    TokenBucket,
)

__all__ = [
    "Concurrency",
    "JobLimits",
    "LimitsUnavailableError",
    "Lock",
    "SlidingWindow",
    "TokenBucket",
]
