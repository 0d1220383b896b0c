"""A host's module as `jobrail worker --app tests.support.host_worker:rail` loads it:
its JobRail, from the environment, and its job types."""

from jobrail import JobRail
from tests.support.host_app import declare_jobs

rail = JobRail()
render = declare_jobs(rail)
not_a_rail = object()
