"""Loaded by every Python process `bench.path_files` starts (PYTHONPATH): on SIGUSR1 it
starts noting which of the project's files run a function, on SIGUSR2 it stops and
writes them to ``$BENCH_TRACE_OUT.<pid>``. Nothing is done without that variable."""

import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

_OUT = os.environ.get("BENCH_TRACE_OUT")
_ROOT = os.environ.get("BENCH_TRACE_ROOT", "")
_seen: set[str] = set()


def _note(frame: FrameType, event: str, _arg: Any) -> None:
    if event == "call":
        name = frame.f_code.co_filename
        if name.startswith(_ROOT):
            _seen.add(name)


def _start(*_: Any) -> None:
    _seen.clear()
    sys.setprofile(_note)
    threading.setprofile(_note)


def _stop(*_: Any) -> None:
    sys.setprofile(None)
    threading.setprofile(None)  # type: ignore[arg-type]
    Path(f"{_OUT}.{os.getpid()}").write_text("\n".join(sorted(_seen)))


if _OUT and _ROOT:
    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)
