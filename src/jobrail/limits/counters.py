from dataclasses import dataclass, fields


@dataclass
class LimitCounters:
    """Process-wide counts of what the limits decided, for the metrics exporter."""

    admitted: int = 0
    deferred: int = 0
    lock_contention: int = 0
    lock_lost: int = 0
    unavailable: int = 0
    api_rate_limited: int = 0
    api_unavailable: int = 0

    def snapshot(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
