"""Shared kernel: value types and base errors every context may use."""
