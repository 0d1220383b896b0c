"""Refuse request bodies over a size limit with a JSON 413, before anything is done.

A declared ``Content-Length`` over the limit is refused before the body is read; a
body without one (chunked) is counted as it arrives and refused when it goes over.
"""

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from jobrail.api.errors import TrackedSend, asgi_error


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length":
                if not value.isdigit() or int(value) > self.max_bytes:
                    await self._refuse(send)
                    return
                break

        received = 0

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # FastAPI lets an HTTPException raised while reading the body reach
                    # the app's handlers, which answer in the usual JSON error format.
                    raise HTTPException(413, self._message())
            return message

        tracked = TrackedSend(send)
        try:
            await self.app(scope, counting_receive, tracked)
        except HTTPException as exc:
            if exc.status_code != 413 or tracked.started:
                raise
            await self._refuse(send)

    def _message(self) -> str:
        return f"the request body is larger than {self.max_bytes} bytes"

    async def _refuse(self, send: Send) -> None:
        # The unread rest of the body would be taken for the next request: close.
        await asgi_error(send, 413, "payload_too_large", self._message(), close=True)
