"""A host's module whose import starts a thread (as a client library's background thread
would): `jobrail worker --app tests.support.host_threaded:rail` then execs Taskiq's
worker rather than forking worker processes from a process that runs a thread."""

import threading

from tests.support.host_worker import rail, render

__all__ = ["rail", "render"]

threading.Thread(target=threading.Event().wait, name="host-client", daemon=True).start()
