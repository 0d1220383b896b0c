"""Notifications' use cases."""
