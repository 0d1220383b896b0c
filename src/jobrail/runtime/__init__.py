"""Composition: building a process (its modules, registry, broker and container) from settings."""
