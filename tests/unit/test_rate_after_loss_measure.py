"""The rate after a loss is measured on when the handlers started, not on when their
calls reached the recorder: a loaded machine delays arrivals unevenly."""

from tests.support.rate_after_loss import CAPACITY, RATE, busiest_second, handler_starts
from tests.support.recorder import Call


def test_starts_spread_over_more_than_a_second_count_as_such_however_they_arrive() -> None:
    # capacity + rate + 1 handlers started 55 ms apart (1.1 s in all); the first ones'
    # requests were held up (a stalled machine) and reached the recorder with the others.
    count = CAPACITY + int(RATE) + 1
    calls = [
        Call(at=1000.6 + i * 0.001, params={"sent": str(100.0 + i * 0.055)}) for i in range(count)
    ]
    calls.append(Call(at=999.0, params={"sent": "99.0"}))  # started before the loss

    starts = handler_starts(calls, since=100.0)

    assert len(starts) == count
    assert starts == sorted(starts)
    assert busiest_second(starts) <= CAPACITY + RATE
    # Timed at the recorder, the same calls would fail the ceiling.
    assert busiest_second([c.at for c in calls if c.at > 1000]) > CAPACITY + RATE
