"""Sync's adapters: the vendor's HTTP client and its sandbox, SQL, tasks, routes."""
