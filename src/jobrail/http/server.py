"""How ``jobrail api`` serves HTTP: uvicorn on httptools (llhttp), with a header limit,
header and body timeouts and JSON refusals.

httptools is uvicorn's fastest protocol (it parses in C; bench/README.md has the
figures), but it has no limit on the size of a request's headers: a 40 MB
``Authorization`` header was read whole. uvicorn has no header-read timeout either:
its keep-alive timer runs only between requests and stops at the first byte, and
nothing runs before a connection's first byte, so a connection that sends a few bytes
of a request line, or nothing at all, stayed open for good (slowloris). And its
refusal of a request it cannot parse is ``text/plain``. uvicorn offers no hook for
any of this, hence the small subclass of its httptools protocol below (it overrides
uvicorn's ``data_received``, ``connection_made``, ``connection_lost``,
``send_400_response``, the parser's ``on_message_begin``, ``on_url``, ``on_header``,
``on_headers_complete`` and ``on_message_complete`` callbacks and
``on_response_complete``; tests/integration/test_http_server_limits.py holds it to its
behaviour across uvicorn upgrades):

- a request line and headers over ``api.max_header_bytes`` get a JSON 431 and the
  connection is closed: counted as they are parsed, and, for headers that have not
  ended yet, as their bytes arrive (so at most one read past the limit is held);
- from the moment a connection waits for a request (it opened, or it sent a partial
  request line after its previous response), the whole request line and headers must
  arrive within ``api.header_timeout_s``; otherwise a JSON 408 (if it sent anything)
  and the connection is closed;
- once the headers are in, the whole body (``Content-Length`` or chunked) must arrive
  within ``api.body_timeout_s``: a client that sends complete headers and then no
  body, or a byte a second, otherwise held a connection and an app task waiting in
  ``receive()`` for good (the header timer had stopped, and FastAPI reads the body
  before it checks the key, so no key was needed); it gets a JSON 408 and the
  connection is closed. A whole-body deadline rather than a minimum rate: bodies are
  at most ``api.max_body_bytes`` (64 KiB), which any real client sends in well under
  a second. The deadline waits while the client is still waiting for its
  ``100 Continue`` (uvicorn sends it when the app first reads the body);
- a request it cannot parse gets JSON (400), with an ``X-Request-Id`` and
  ``Connection: close``. llhttp refuses a request that carries both ``Content-Length``
  and ``Transfer-Encoding`` (a request-smuggling gap behind a proxy that reads the
  former), a duplicate ``Content-Length``, and a NUL or a control character in the
  request line or a header;
- after such a refusal the connection is closed for writing and what the client still
  sends is read and dropped for a short while before the socket is closed ("lingering
  close", as nginx does): closing a socket with unread data makes the kernel reset the
  connection, and a client still sending its 40 MB would then lose the response.
"""

import asyncio
import contextlib
import enum
import logging
import socket
import sys
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from jobrail.http.errors import error_body

log = logging.getLogger("jobrail.api.server")

LINGER_S = 2.0
DEFAULT_MAX_HEADER_BYTES = 16 * 1024

_REFUSALS = {
    408: ("request_timeout", "the request line and headers did not arrive in time"),
    431: ("headers_too_large", "the request line and headers are too large"),
}
_BODY_LATE = "the request body did not arrive in time"


class _Phase(enum.Enum):
    """Where the connection's current request is, as the parser has seen it."""

    WAITING = "waiting"  # no byte of a request yet (it opened, or a response is done)
    HEAD = "head"  # its request line or headers have begun, not ended
    BODY = "body"  # its headers are in, its body is under way
    RECEIVED = "received"  # all of it is in; the app answers


class _HeadersTooLargeError(Exception):
    """Raised in a parser callback: httptools then stops and uvicorn calls
    `send_400_response`, which answers 431."""


class JobrailHttpToolsProtocol(HttpToolsProtocol):
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase = _Phase.WAITING
        self._head_received = 0  # bytes read while the current head has not ended
        self._head_parsed = 0  # its request line and headers, as parsed so far
        self._too_large = False
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_timer()
        self._stop_body_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:  # lingering after a refusal: read and drop
            return
        if self._phase in (_Phase.WAITING, _Phase.HEAD):
            self._head_received += len(data)
        super().data_received(data)
        if self._refused or self.transport.is_closing():
            self._stop_header_timer()
            self._stop_body_timer()
        elif self._phase in (_Phase.WAITING, _Phase.HEAD):
            if self._head_received > self.max_header_bytes:
                # Headers that have not ended, already past the limit: the parser holds
                # what it has read of them, so no more is read.
                self._too_large = True
                self._refuse(431)
                return
            # Waiting for (the rest of) a request line and headers.
            self._start_header_timer()
            self._stop_body_timer()
        elif self._phase is _Phase.BODY:
            # Headers in, waiting for (the rest of) the body: the timer keeps running
            # across reads, so trickling bytes does not reset it.
            self._stop_header_timer()
            self._start_body_timer()
        else:
            self._stop_header_timer()
            self._stop_body_timer()

    # -- the parser's callbacks ------------------------------------------------------

    def on_message_begin(self) -> None:
        self._phase = _Phase.HEAD
        self._head_parsed = 0
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url) + 16)  # with the method and the version
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + 4)  # with ": " and CRLF
        super().on_header(name, value)

    def _count_head(self, size: int) -> None:
        self._head_parsed += size
        if self._head_parsed > self.max_header_bytes:
            self._too_large = True
            raise _HeadersTooLargeError

    def on_headers_complete(self) -> None:
        self._phase = _Phase.BODY
        self._head_received = 0
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._phase = _Phase.RECEIVED
        super().on_message_complete()

    def on_response_complete(self) -> None:
        if self._phase is _Phase.RECEIVED:  # not a pipelined request already under way
            self._phase = _Phase.WAITING
        super().on_response_complete()

    # -- the timers ------------------------------------------------------------------

    def _start_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self._phase not in (_Phase.WAITING, _Phase.HEAD):
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a response is being made; uvicorn's own timers take over after it
        if self._phase is _Phase.HEAD or self._head_received:
            self._refuse(408)
        else:
            self.transport.close()

    def _start_body_timer(self) -> None:
        if self._body_timer is None:
            self._body_timer = self.loop.call_later(self.body_timeout_s, self._body_late)

    def _stop_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_late(self) -> None:
        self._body_timer = None
        if self.transport.is_closing() or self._phase is not _Phase.BODY:
            return
        cycle = self.cycle
        if cycle is not None and cycle.waiting_for_100_continue and not cycle.response_started:
            # The client waits to be asked for the body; the app has not asked yet.
            self._start_body_timer()
            return
        if cycle is None or cycle.response_complete:
            # Answered already (without reading the whole body): no second answer.
            self.transport.close()
            return
        self._refuse(408, _BODY_LATE, code="request_timeout")

    # -- refusals --------------------------------------------------------------------

    def send_400_response(self, msg: str) -> None:
        """uvicorn calls this for a request httptools could not parse (or that a
        callback above refused)."""
        if self._too_large:
            self._refuse(431)
        else:
            self._refuse(400, msg)

    def _refuse(
        self, status: int, msg: str = "invalid HTTP request", *, code: str | None = None
    ) -> None:
        self._stop_header_timer()
        self._stop_body_timer()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            # A bad or late body of a request the app is answering: the app's further
            # output is dropped, an app waiting in receive() is told the client is gone,
            # and a response already under way can only be cut short.
            cycle.disconnected = True
            cycle.message_event.set()
            if cycle.response_started:
                self.transport.close()
                return
        if code is not None:
            message = msg
        else:
            code, message = _REFUSALS.get(status, ("bad_request", msg.rstrip(".")))
        body = error_body(code, message)
        head = (
            f"HTTP/1.1 {status} {_reason(status)}\r\n"
            "content-type: application/json\r\n"
            f"content-length: {len(body)}\r\n"
            "connection: close\r\n"
            f"x-request-id: {uuid.uuid4()}\r\n\r\n"
        ).encode()
        # Written by hand: uvicorn's own writer is the app's, through its cycle, and the
        # parser's state after an error is of no further use on a connection that is
        # being closed.
        self.transport.write(head + body)
        self._refused = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)
        else:
            self.transport.close()


def _reason(status: int) -> str:
    return HTTPStatus(status).phrase


def protocol_class(
    max_header_bytes: int, header_timeout_s: float, body_timeout_s: float
) -> type[JobrailHttpToolsProtocol]:
    """The protocol class for uvicorn.Config(http=...), with these limits."""
    return type(
        "JobrailHttpToolsProtocol",
        (JobrailHttpToolsProtocol,),
        {
            "max_header_bytes": max_header_bytes,
            "header_timeout_s": header_timeout_s,
            "body_timeout_s": body_timeout_s,
        },
    )


def uvicorn_options(
    max_header_bytes: int, header_timeout_s: float, body_timeout_s: float
) -> dict[str, Any]:
    """The uvicorn.Config / uvicorn.run options that make these limits."""
    return {
        "http": protocol_class(max_header_bytes, header_timeout_s, body_timeout_s),
        # X-Forwarded-For is believed only from api.trusted_proxies, by the app itself
        # (jobrail.runtime.app); uvicorn's default trusts 127.0.0.1.
        "proxy_headers": False,
    }


# -- stopping ------------------------------------------------------------------------

# The exit status of a server that could not start, as uvicorn.run's.
STARTUP_FAILURE = 3
# How long a forced exit waits for the requests whose connections it closed to end.
FORCED_REQUESTS_S = 5.0


@dataclass(frozen=True)
class ShutdownHooks:
    """What an app does when its server stops (jobrail.runtime.app.shutdown_hooks)."""

    # As the server's shutdown starts, before it waits for the responses under way: the
    # app ends what would never end by itself (its event streams).
    stopping: Callable[[], Awaitable[None]]
    # On a forced exit: the app's shutdown gives its running jobs no grace period.
    hurry: Callable[[], None]


class JobrailServer(uvicorn.Server):
    """uvicorn's server, with the two things jobrail's shutdown needs and uvicorn has no
    hook for (tests/e2e/test_api_shutdown.py holds it to them across uvicorn upgrades):

    - As its shutdown starts, the app's ``stopping`` hook runs. uvicorn waits for every
      response under way to end, and an event stream's never does: with one client
      following the feed, SIGTERM waited for the SIGKILL that came after it, and the
      app's own shutdown (its relay, its jobs' grace period) never ran.
    - A forced exit (Ctrl-C again while it waits, as uvicorn's log invites) still runs
      the app's shutdown, hurried: uvicorn skips it, so the loop's close cancelled the
      app's lifespan and the requests still open, and each logged its traceback. Here
      the connections still open are closed (their requests see their client gone),
      and the app's shutdown stops its running jobs at once; they resume when the
      process starts again.
    """

    def __init__(self, config: Config, hooks: ShutdownHooks | None = None) -> None:
        super().__init__(config)
        self._hooks = hooks

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        forced = self.force_exit
        super().handle_exit(sig, frame)
        if self.force_exit and not forced and self._hooks is not None:
            # A signal handler runs between two steps of the loop, which may be asleep
            # in its selector: woken through its self-pipe.
            with contextlib.suppress(RuntimeError):  # no loop runs: nothing to hurry
                asyncio.get_running_loop().call_soon_threadsafe(self._hooks.hurry)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._hooks is not None:
            try:
                await self._hooks.stopping()
            except Exception:  # the shutdown goes on: uvicorn's own, then the app's
                log.exception("the app's stopping hook failed")
        await super().shutdown(sockets)
        if self.force_exit:  # uvicorn skipped the app's shutdown
            for connection in list(self.server_state.connections):
                transport = getattr(connection, "transport", None)
                if transport is not None:
                    transport.close()
            if self.server_state.tasks:
                await asyncio.wait(set(self.server_state.tasks), timeout=FORCED_REQUESTS_S)
            # Forced while the app's shutdown ran (hurried, it has ended): not again.
            ended = getattr(self.lifespan, "shutdown_event", None)
            if ended is None or not ended.is_set():
                await self.lifespan.shutdown()


def serve(app: Any, hooks: ShutdownHooks | None = None, **options: Any) -> None:
    """What ``uvicorn.run(app, **options)`` does in one process, on `JobrailServer`."""
    config = Config(app, **options)
    server = JobrailServer(config, hooks)
    # Once shut down, uvicorn raises again the signals it caught (for the handlers it
    # replaced): a Ctrl-C arrives here as KeyboardInterrupt, which uvicorn.run ignores.
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:  # it could not start (the port, the app's startup)
        sys.exit(STARTUP_FAILURE)
