"""Lines that processes of this machine append to one file, for a test to read in order."""

import os
from pathlib import Path


def append_line(path: str | Path, line: str) -> None:
    """One write with O_APPEND: a line is whole when a reader sees it, and concurrent
    writers' lines never interleave."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
