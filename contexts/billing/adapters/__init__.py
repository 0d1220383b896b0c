"""Billing's adapters: HTTP routes, SQL persistence, Taskiq tasks."""
