"""The apps the tests run: the reference application's modules (``workers.app``), and
``JobRail``s that test processes are started with (``JOBRAIL_APP=tests.support.apps:…``)."""

from jobrail import JobRail
from tests.support import cluster_jobs, jobs
from workers.app import MODULES as REFERENCE

__all__ = ["REFERENCE", "cluster_split", "reference_and_test_jobs", "test_jobs"]

test_jobs = JobRail(modules=[jobs.module])
"""demo (the default JOBRAIL_MODULES) and the tests' job types."""

reference_and_test_jobs = JobRail(modules=[*REFERENCE, jobs.module])
"""The reference application and the tests' job types."""

cluster_split = JobRail(modules=[cluster_jobs.module])
"""A job type whose keys cannot share a Redis Cluster slot: refused at start-up."""
