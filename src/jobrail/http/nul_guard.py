"""Refuse a NUL character anywhere in a request with a JSON 422, before anything is done
(``jobrail.http.guard.RequestGuard`` makes the checks below).

Postgres cannot store U+0000 in ``text`` or ``jsonb`` (``UntranslatableCharacterError``):
a NUL in a message, an invoice line or a customer id was a 500 halfway through a
request. SQLite would store it, so the refusal is made here, at the edge, for both
modes alike: in the path (``%00`` arrives decoded), the query string, the headers and
the body.

The body is JSON, where a NUL is either a raw 0x00 byte (which JSON does not allow in
a string anyway) or the escape ``\\u0000``, which is six bytes that the body can
contain without meaning NUL: ``"\\\\u0000"`` is an escaped backslash followed by the
text ``u0000``. Removing every escaped backslash (``\\\\``) first, left to right as
JSON reads them, leaves ``\\u0000`` only where it is the escape. Both searches run in C
over the bytes: no second JSON parse of every body.

The whole body is scanned once it has arrived (it is bounded by the body size limit, and
FastAPI holds it whole before it validates it): an escape split across two chunks is
found, and the refusal comes before the route runs, so nothing is half-written.
"""

from typing import Any

from starlette.types import Scope, Send

from jobrail.http.errors import RequestRefused, asgi_error

NUL_MESSAGE = "the request contains a NUL character (U+0000), which cannot be stored"


class NulCharacterError(RequestRefused):
    """Raised from the body's receive: FastAPI passes HTTPExceptions raised while it
    reads the body on to the app's handlers (see jobrail.http.errors)."""

    def __init__(self, where: str) -> None:
        super().__init__(422, "validation_error", NUL_MESSAGE, _details(where))
        self.where = where


def _details(where: str) -> list[dict[str, Any]]:
    return [{"loc": [where], "msg": NUL_MESSAGE, "type": "nul_character"}]


def json_has_nul(body: bytes) -> bool:
    """Whether JSON text holds a NUL: raw, or as the escape \\u0000 (not \\\\u0000)."""
    if b"\x00" in body:
        return True
    if b"\\u0000" not in body:
        return False
    return b"\\u0000" in body.replace(b"\\\\", b"")


def nul_in_scope(scope: Scope) -> str | None:
    if "\x00" in scope["path"]:
        return "path"
    query: bytes = scope.get("query_string", b"")
    if b"%00" in query or b"\x00" in query:
        return "query"
    for _name, value in scope["headers"]:
        if b"\x00" in value:
            return "header"
    return None


async def refuse_nul(send: Send, where: str) -> None:
    await asgi_error(send, 422, "validation_error", NUL_MESSAGE, _details(where))
