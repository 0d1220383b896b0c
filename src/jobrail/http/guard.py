"""The request guard: one pure ASGI middleware for what every request is checked for
before the app sees it, and for the JSON 500 of what the app did not handle.

In the order a request meets them:

- **Body size.** A declared ``Content-Length`` over ``api.max_body_bytes`` is refused
  with a JSON 413 before the body is read, and the connection closed: the unread rest of
  the body would be taken for the next request. A body without one (chunked) is counted
  as it arrives and refused when it goes over, with FastAPI's handlers' JSON 413 (the
  server still frames the rest of a chunked body, so the connection may stay).
- **NUL characters** (``jobrail.http.nul_guard``): a NUL in the path, the query string,
  a header or the JSON body is a JSON 422, before the route runs.
- **HEAD** runs as GET, and every answer to it (the guard's own refusals too) goes out
  without its body; its headers, the ``Content-Length`` too, are GET's. FastAPI routes a
  GET route's HEAD to nothing (405), where HTTP asks every server to answer HEAD like
  GET. The app's scope says so (``HEAD_SCOPE_KEY``), so that a route that would answer
  with an endless stream answers with a page (``jobrail.events.api``); the route the
  app matched is copied back to the server's scope for the request's span and log.
- **Unhandled errors.** Starlette answers an exception that no handler took in
  ServerErrorMiddleware, the outermost layer: outside RequestTelemetry, so that 500
  had no ``X-Request-Id``. And it raises the exception again to the server, which then
  drops the connection (keep-alive, no ``Connection: close``) and fails the client's
  next request on it. Here the error is logged and answered, and the connection stays
  usable. A client that went away while the app read its body (Starlette's
  ``ClientDisconnect``) is no error: any client can do that at will, so it is logged at
  DEBUG, without a traceback, and not answered (there is nobody to answer).

The three were three middlewares. Each wrapped ``send`` and ``receive`` of every request
again, which cost about a tenth of the API's time per request (bench/README.md), so
they are one: one ``receive`` that counts and scans, one ``send`` that notes the start
of the response.
"""

import logging

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobrail.http.errors import asgi_error, error_for, outage_of
from jobrail.http.nul_guard import NulCharacterError, json_has_nul, nul_in_scope, refuse_nul

log = logging.getLogger("jobrail.api")

# In the app's scope of a request that came as HEAD (and runs as GET).
HEAD_SCOPE_KEY = "jobrail.head"


def is_head(scope: Scope) -> bool:
    """Whether the request came as HEAD: its answer's body will not be sent."""
    return bool(scope.get(HEAD_SCOPE_KEY))


def _bodiless(send: Send) -> Send:
    async def send_head(message: Message) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            message = {**message, "body": b""}
        await send(message)

    return send_head


class RequestGuard:
    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self._too_large = f"the request body is larger than {max_body_bytes} bytes"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        server_scope = scope
        head = scope["method"] == "HEAD"
        if head:  # the server's own scope still says HEAD
            scope = {**scope, "method": "GET", HEAD_SCOPE_KEY: True}
            send = _bodiless(send)
        for name, value in scope["headers"]:
            if name == b"content-length":
                # Any length of more than 18 digits is over the limit, and int() of a
                # few thousand digits raises: its length is looked at first.
                if not value.isdigit() or len(value) > 18 or int(value) > self.max_body_bytes:
                    await self._refuse_size(send)
                    return
                break
        where = nul_in_scope(scope)
        if where is not None:
            await refuse_nul(send, where)
            return

        received = 0
        chunks: list[bytes] = []
        started = False

        async def guarded_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                body: bytes = message.get("body", b"")
                received += len(body)
                if received > self.max_body_bytes:
                    # FastAPI lets an HTTPException raised while reading the body reach
                    # the app's handlers, which answer in the usual JSON error format.
                    raise HTTPException(413, self._too_large)
                if message.get("more_body", False):
                    chunks.append(body)
                else:
                    if chunks:
                        chunks.append(body)
                        body = b"".join(chunks)
                        chunks.clear()
                    if json_has_nul(body):
                        raise NulCharacterError("body")
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, guarded_receive, tracked_send)
        except ClientDisconnect:
            log.debug("client went away on %s %s", server_scope["method"], scope.get("path"))
        except NulCharacterError as exc:
            # A route that read the body outside FastAPI's request handling.
            if started:
                raise
            await refuse_nul(send, exc.where)
        except Exception as exc:
            if started:  # half a response is out: only dropping the connection is left
                raise
            if isinstance(exc, HTTPException) and exc.status_code == 413:
                await self._refuse_size(send)
                return
            # A backing service that is away: 503, not 500.
            answer = error_for(exc, outage_of(scope.get("app")))
            if answer is not None:
                await answer(scope, receive, send)
                return
            log.exception("unhandled error on %s %s", server_scope["method"], scope.get("path"))
            await asgi_error(send, 500, "internal_error", "internal error")
        finally:
            if head and "route" in scope:
                server_scope["route"] = scope["route"]

    async def _refuse_size(self, send: Send) -> None:
        await asgi_error(send, 413, "payload_too_large", self._too_large, close=True)
