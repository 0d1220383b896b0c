"""Notifications' domain: a message to a recipient and whether it went out."""
