"""Logs now; traces and metrics as the observability work lands."""
