"""Billing's use cases. Each runs the same from a route or from a task."""
