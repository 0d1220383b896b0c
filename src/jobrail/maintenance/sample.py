"""The console's overview over time, as samples: one number per metric, minute and label.

- ``finished``: jobs that finished in the minute, labelled ``type|status``;
- ``started``: jobs that started in the minute (written for every minute sampled, so a
  minute with no work still shows it was sampled);
- ``start_p50`` / ``start_p95``: of those, the seconds from when each could run (its
  ``run_after``, else its creation) to its start;
- ``waiting``: jobs pending or retrying, by queue, when the minute was sampled.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

FINISHED = "finished"
STARTED = "started"
START_P50 = "start_p50"
START_P95 = "start_p95"
WAITING = "waiting"

MINUTE = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class Sample:
    metric: str
    minute: datetime
    label: str
    value: float


def floor_minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def finished_label(job_type: str, status: str) -> str:
    return f"{job_type}|{status}"


def split_label(label: str) -> tuple[str, str]:
    job_type, _, status = label.rpartition("|")
    return job_type, status


def percentile(values: Sequence[float], share: float) -> float:
    """The nearest-rank percentile of `values` (sorted or not); 0 when there are none."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[max(math.ceil(share * len(ordered)) - 1, 0)]


def minute_samples(
    minute: datetime, finished: Sequence[tuple[str, str, int]], delays: Sequence[float]
) -> list[Sample]:
    """The samples of one minute from what finished and what started in it."""
    samples = [
        Sample(FINISHED, minute, finished_label(job_type, status), count)
        for job_type, status, count in finished
        if count
    ]
    samples.append(Sample(STARTED, minute, "", len(delays)))
    if delays:
        samples.append(Sample(START_P50, minute, "", percentile(delays, 0.5)))
        samples.append(Sample(START_P95, minute, "", percentile(delays, 0.95)))
    return samples
