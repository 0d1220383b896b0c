"""How ``jobrail api`` serves HTTP: uvicorn on h11, with a header limit, header and
body timeouts and JSON refusals.

uvicorn's default protocol is httptools when it is installed, and httptools has no
limit on the size of a request's headers: a 40 MB ``Authorization`` header was read
whole. h11 has one (``h11_max_incomplete_event_size``, ``api.max_header_bytes``), so
jobrail runs uvicorn on h11.

uvicorn has no header-read timeout either: its keep-alive timer runs only between
requests and stops at the first byte, and nothing runs before a connection's first
byte, so a connection that sends a few bytes of a request line, or nothing at all,
stayed open for good (slowloris). And its refusal of a request it cannot parse is
``text/plain``. uvicorn offers no hook for either, hence the small subclass of its
h11 protocol below (it overrides uvicorn's ``data_received``, ``connection_made``,
``connection_lost`` and ``send_400_response``; tests/integration/test_http_server_limits.py
holds it to its behaviour across uvicorn upgrades):

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
- a request it cannot parse gets JSON, with h11's status (431 for headers over the
  limit, else 400), an ``X-Request-Id`` and ``Connection: close``; so does one that
  carries both ``Content-Length`` and ``Transfer-Encoding`` (h11 would let the latter
  win and keep the connection, a request-smuggling gap behind a proxy that reads the
  former);
- after such a refusal the connection is closed for writing and what the client still
  sends is read and dropped for a short while before the socket is closed ("lingering
  close", as nginx does): closing a socket with unread data makes the kernel reset the
  connection, and a client still sending its 40 MB would then lose the response.
"""

import asyncio
import uuid
from http import HTTPStatus
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from jobrail.api.errors import error_body

LINGER_S = 2.0
H11_DEFAULT_MAX_HEADER_BYTES = 16 * 1024  # h11's own default, when none is configured

_REFUSALS = {
    408: ("request_timeout", "the request line and headers did not arrive in time"),
    431: ("headers_too_large", "the request line and headers are too large"),
}
_BODY_LATE = "the request body did not arrive in time"


class _Connection(h11.Connection):
    """h11's connection, remembering the error that ended it (for its status hint)."""

    error: h11.RemoteProtocolError | None = None

    def next_event(self) -> Any:
        try:
            event = super().next_event()
            if isinstance(event, h11.Request) and _both_framings(event.headers):
                raise h11.RemoteProtocolError(
                    "a request may not carry both Content-Length and Transfer-Encoding",
                    error_status_hint=400,
                )
            return event
        except h11.RemoteProtocolError as exc:
            self.error = exc
            raise


def _both_framings(headers: Any) -> bool:
    """A request that says its length twice (RFC 9112 6.1): h11 lets Transfer-Encoding
    win and keeps the connection open, so a proxy in front that went by Content-Length
    would see a different request boundary than jobrail does (request smuggling). Such
    a request is refused and the connection closed."""
    names = {name for name, _ in headers}
    return b"content-length" in names and b"transfer-encoding" in names


class JobrailH11Protocol(H11Protocol):
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        max_size = self.config.h11_max_incomplete_event_size
        self.conn = _Connection(h11.SERVER, max_size or H11_DEFAULT_MAX_HEADER_BYTES)
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
        super().data_received(data)
        if self._refused or self.transport.is_closing():
            self._stop_header_timer()
            self._stop_body_timer()
        elif self.conn.their_state is h11.IDLE:
            # Waiting for (the rest of) a request line and headers.
            self._start_header_timer()
            self._stop_body_timer()
        elif self.conn.their_state is h11.SEND_BODY:
            # Headers in, waiting for (the rest of) the body: the timer keeps running
            # across reads, so trickling bytes does not reset it.
            self._stop_header_timer()
            self._start_body_timer()
        else:
            self._stop_header_timer()
            self._stop_body_timer()

    def _start_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a response is being made; uvicorn's own timers take over after it
        if self.conn.trailing_data[0]:
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
        if self.transport.is_closing() or self.conn.their_state is not h11.SEND_BODY:
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

    def send_400_response(self, msg: str) -> None:
        """uvicorn calls this for a request h11 could not parse."""
        error = getattr(self.conn, "error", None)
        status = error.error_status_hint if error is not None else 400
        self._refuse(status if status in _REFUSALS else 400, msg)

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
        # Written by hand, not through h11: h11 refuses to send a response while the
        # client's request is incomplete (the 408), and its state after an error is of
        # no further use on a connection that is being closed.
        self.transport.write(head + body)
        self._refused = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)
        else:
            self.transport.close()


def _reason(status: int) -> str:
    return HTTPStatus(status).phrase


def protocol_class(header_timeout_s: float, body_timeout_s: float) -> type[JobrailH11Protocol]:
    """The protocol class for uvicorn.Config(http=...), with these timeouts."""
    return type(
        "JobrailH11Protocol",
        (JobrailH11Protocol,),
        {"header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s},
    )


def uvicorn_options(
    max_header_bytes: int, header_timeout_s: float, body_timeout_s: float
) -> dict[str, Any]:
    """The uvicorn.Config / uvicorn.run options that make these limits."""
    return {
        "http": protocol_class(header_timeout_s, body_timeout_s),
        "h11_max_incomplete_event_size": max_header_bytes,
        # X-Forwarded-For is believed only from api.trusted_proxies, by the app itself
        # (jobrail.api.app); uvicorn's default trusts 127.0.0.1.
        "proxy_headers": False,
    }
