"""Sync's use cases: request a sync (HTTP), run it (worker), read the account."""
