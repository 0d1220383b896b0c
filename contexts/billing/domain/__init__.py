"""Billing's domain: invoices and their lines, in plain Python."""
