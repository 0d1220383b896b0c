"""The apps the tests run: the reference application's modules (``workers.app``), and
``JobRail``s that test processes are started with (``JOBRAIL_APP=tests.support.apps:…``)."""

from jobrail import JobRail
from tests.support import cluster_jobs, jobs
from workers.app import MODULES as REFERENCE

__all__ = ["REFERENCE", "cluster_split", "reference_and_test_jobs", "test_jobs"]

test_jobs = JobRail(modules=[jobs.module], default_modules=["demo"])
"""demo (unless JOBRAIL_MODULES says otherwise) and the tests' job types."""

reference_and_test_jobs = JobRail(modules=[*REFERENCE, jobs.module], default_modules=["demo"])
"""The reference application (with the demo, as workers.app) and the tests' job types."""

cluster_split = JobRail(modules=[cluster_jobs.module])
"""A job type whose keys cannot share a Redis Cluster slot: refused at start-up."""
