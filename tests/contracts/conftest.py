"""The fixtures the dispatcher's contract tests share (tests/support/dispatch_store.py)."""

from tests.support.dispatch_store import subject

__all__ = ["subject"]
