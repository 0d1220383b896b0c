"""Notifications' adapters: SQL, e-mail senders, tasks, routes, settings."""
