"""Real servers on loopback for tests: an SMTP server (aiosmtpd) and the sandbox vendor."""

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from typing import Any

import uvicorn
from aiosmtpd.controller import Controller

from contexts.sync.adapters.sandbox import SandboxState, create_sandbox_app


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class SmtpSink:
    """Every message the SMTP server accepted."""

    messages: list[Message] = field(default_factory=list)
    port: int = 0

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(message_from_bytes(envelope.original_content))
        return "250 OK"


@contextmanager
def smtp_server() -> Iterator[SmtpSink]:
    sink = SmtpSink(port=free_port())
    controller = Controller(sink, hostname="127.0.0.1", port=sink.port)
    controller.start()
    try:
        yield sink
    finally:
        controller.stop()


@dataclass
class RunningSandbox:
    url: str
    state: SandboxState


@contextmanager
def sandbox_vendor(**options: Any) -> Iterator[RunningSandbox]:
    # A test's sandbox is its recorder: it keeps every call of the test (the API's
    # sandbox keeps the last 1000).
    options.setdefault("max_calls", 100_000)
    options.setdefault("max_accounts", 100_000)
    state = SandboxState(**options)
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_sandbox_app(state), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield RunningSandbox(url=f"http://127.0.0.1:{port}", state=state)
    finally:
        server.should_exit = True
        thread.join(10)


@asynccontextmanager
async def served(app: Any) -> AsyncIterator[str]:
    """`app` (its lifespan already entered by the caller) on a loopback port, in this
    event loop, for what an in-process transport cannot do (an open stream); its URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
    )
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 10
    while not server.started:
        if task.done() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
