"""The public facade: what a host app imports to run jobrail inside it (``JobRail``)."""

from jobrail.facade.handle import JobHandle
from jobrail.facade.rail import JobRail

__all__ = ["JobHandle", "JobRail"]
