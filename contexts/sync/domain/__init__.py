"""Sync's domain: an external account kept in step with a vendor."""
