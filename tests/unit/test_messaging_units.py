import json
import os
import uuid
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from taskiq import InMemoryBroker

from jobrail.jobs.retry import RetryPolicy
from jobrail.kernel.ids import JobId, new_id, random_bytes, random_hex
from jobrail.transport.codec import MalformedMessageError
from jobrail.transport.topology import pick_tier
from tests.support.wire import job_envelope, parse_job_message

TIERS = [250, 1_000, 5_000, 30_000, 120_000, 600_000, 3_600_000]


@given(st.floats(min_value=0.001, max_value=10 * 3_600_000, allow_nan=False))
def test_delays_through_the_tiers_are_never_early_and_late_by_less_than_the_shortest_tier(
    delay_ms: float,
) -> None:
    waited, remaining, hops = 0.0, delay_ms, 0
    while (tier := pick_tier(remaining, TIERS)) is not None:
        waited += tier
        remaining = delay_ms - waited
        hops += 1

    assert waited >= delay_ms
    assert waited - delay_ms < TIERS[0]
    assert hops <= 30 + delay_ms / TIERS[-1]


def test_a_message_due_now_needs_no_tier() -> None:
    assert pick_tier(0, TIERS) is None
    assert pick_tier(-5, TIERS) is None


def test_the_largest_tier_that_fits_is_chosen() -> None:
    assert pick_tier(7_000, TIERS) == 5_000
    assert pick_tier(100, TIERS) == 250


def test_backoff_is_bounded_by_the_cap_and_jittered_below_the_bound() -> None:
    policy = RetryPolicy(base_s=1, cap_s=10, rng=lambda: 0.5)
    assert [policy.delay(n).total_seconds() for n in (1, 2, 3, 4, 5, 50)] == [
        0.5,
        1.0,
        2.0,
        4.0,
        5.0,
        5.0,
    ]


def test_backoff_without_jitter_is_the_bound() -> None:
    policy = RetryPolicy(base_s=0.2, cap_s=300, jitter=False)
    assert policy.delay(3) == timedelta(seconds=0.8)


def test_job_messages_are_taskiq_messages_that_taskiq_parses_as_json() -> None:
    job_id = JobId(uuid.uuid4())
    envelope = job_envelope(
        job_id=job_id, job_type="demo.echo", queue="jobs.default", tenant_id="acme"
    )

    message = InMemoryBroker().formatter.loads(envelope.body)

    assert message.task_name == "demo.echo"
    assert message.kwargs == {"job_id": str(job_id)}
    assert message.labels["tenant_id"] == "acme"
    assert parse_job_message(envelope.body).job_id == job_id


def _with_labels(labels: dict[str, object]) -> bytes:
    body = {
        "task_id": "1",
        "task_name": "a.b",
        "kwargs": {"job_id": str(uuid.uuid4())},
        "labels": labels,
    }
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"\x80\x04\x95 not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"task_id": "1", "kwargs": {"job_id": "x"}}', "task_name"),
        (b'{"task_id": "1", "task_name": "a.b", "kwargs": {}}', "kwargs"),
        (b'{"task_id": "1", "task_name": "a.b", "kwargs": {"job_id": "nope"}}', "UUID"),
        (_with_labels({"deferrals": "2"}), "label deferrals must be a whole number"),
        (_with_labels({"deferrals": -1}), "label deferrals must be a whole number"),
        (_with_labels({"not_before": "soon"}), "label not_before must be a number"),
        (_with_labels({"tenant_id": 7}), "label tenant_id must be a string"),
        (_with_labels({"prepaid": "k"}), "label prepaid must be a list of strings"),
        (_with_labels({"limit_keys": [1]}), "label limit_keys must be a list of strings"),
        (_with_labels({"not_before": 1e20}), "label not_before is not a time"),
        (
            b'{"task_id": "1", "task_name": "a.b", "kwargs": {"job_id": "'
            + str(uuid.uuid4()).encode()
            + b'"}, "labels": {"not_before": NaN}}',
            "label not_before is not a time",
        ),
        (_with_labels({"waiting_since": "a while"}), "label waiting_since must be a number"),
        (_with_labels({"waiting_since": -1e300}), "label waiting_since is not a time"),
        # Nested past the recursion limit: json's RecursionError, a RuntimeError, ended
        # the consumer's loop.
        (b"[" * 1200 + b"]" * 1200, "nested too deeply"),
        (b'{"a":' * 5000 + b"1" + b"}" * 5000, "nested too deeply"),
        (_with_labels({"tenant_id": "\ud800"}), "lone surrogate"),
        # The same surrogate as UTF-8 bytes rather than an escape: no UTF-8 text.
        (_with_labels({"tenant_id": "x"}).replace(b'"x"', b'"x\xed\xa0\x80"'), "not JSON"),
        (
            b'{"task_id": "\\udfff", "task_name": "a.b", "kwargs": {"job_id": "'
            + str(uuid.uuid4()).encode()
            + b'"}}',
            "lone surrogate",
        ),
        (
            b'{"task_id": "\\u0007", "task_name": "a.b", "kwargs": {"job_id": "'
            + str(uuid.uuid4()).encode()
            + b'"}}',
            "task_id is not printable",
        ),
    ],
)
def test_anything_but_a_job_message_is_refused_with_a_reason(body: bytes, reason: str) -> None:
    with pytest.raises(MalformedMessageError, match=reason):
        parse_job_message(body)


def test_a_surrogate_pair_escape_is_text_and_read() -> None:
    body = _with_labels({"tenant_id": "\U0001f600"})  # json.dumps writes \ud83d\ude00
    assert b"\\ud83d" in body

    from jobrail.transport.codec import decode

    assert decode(body).tenant_id == "\U0001f600"


def test_pickle_is_not_how_taskiq_serialises_here() -> None:
    body = json.dumps({"x": 1}).encode()
    assert InMemoryBroker().serializer.loadb(body) == {"x": 1}
    with pytest.raises(ValueError):
        InMemoryBroker().serializer.loadb(b"\x80\x04\x95\x05\x00\x00\x00")


def test_ids_are_time_ordered_uuid7() -> None:
    ids = [new_id() for _ in range(1000)]
    assert all(i.version == 7 for i in ids)
    assert len(set(ids)) == 1000
    assert [i.int >> 80 for i in ids] == sorted(i.int >> 80 for i in ids)


def test_a_forked_child_makes_ids_its_parent_does_not() -> None:
    """Ids come from random bytes read a page at a time: a forked child must not hand
    out the bytes its parent still holds."""
    new_id()  # the parent holds a page
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids and token, then out
        try:
            os.write(write, b"".join(new_id().bytes for _ in range(4)) + random_bytes(16))
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        child = pipe.read()
    os.waitpid(pid, 0)
    parent = b"".join(new_id().bytes for _ in range(4)) + random_bytes(16)
    assert len(child) == len(parent) == 80
    # The millisecond part may match; the random part must not.
    for i in range(4):
        assert child[16 * i + 6 : 16 * i + 16] != parent[16 * i + 6 : 16 * i + 16]
    assert child[64:] != parent[64:]


def test_random_hex_is_as_long_as_asked_and_never_repeats() -> None:
    tokens = [random_hex(16) for _ in range(2000)]
    assert all(len(token) == 32 and int(token, 16) >= 0 for token in tokens)
    assert len(set(tokens)) == 2000
    assert len(random_bytes(5000)) == 5000  # more than a page at once


def test_the_time_a_job_started_waiting_rides_with_its_message() -> None:
    from datetime import UTC, datetime

    from jobrail.jobs.messages import JobMessage
    from jobrail.transport.codec import decode, encode

    since = datetime(2026, 12, 1, 12, 0, 0, 250000, tzinfo=UTC)
    message = JobMessage(JobId(uuid.uuid4()), "a.b", "jobs.default", "acme")
    again = message.again(since, deferred=True, waiting_since=since)
    later = again.again(
        since + timedelta(seconds=9), deferred=True, waiting_since=datetime.now(UTC)
    )

    assert decode(encode(again).body).waiting_since == since
    assert decode(encode(later).body).waiting_since == since  # the first deferral's
    assert decode(encode(message).body).waiting_since is None
