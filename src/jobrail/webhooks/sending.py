"""POSTing a delivery to a receiver (httpx)."""

import asyncio
import socket
from urllib.parse import urlsplit

import httpx

from jobrail.kernel.errors import PermanentError
from jobrail.webhooks.domain import is_private
from jobrail.webhooks.ports import DeliveryFailedError


class HttpxWebhookSender:
    """One pooled client. Redirects are not followed (a redirect could lead where the
    URL itself may not); unless private addresses are allowed, the receiver's name is
    resolved first and a private, loopback or link-local address is refused for good
    (a PermanentError: the delivery fails without retries)."""

    def __init__(self, *, timeout_s: float, private_ok: bool) -> None:
        self._client = httpx.AsyncClient(
            timeout=timeout_s,
            follow_redirects=False,
            limits=httpx.Limits(max_connections=50, max_keepalive_connections=10),
        )
        self._private_ok = private_ok

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> int:
        if not self._private_ok:
            await self._check_resolves_public(url)
        try:
            response = await self._client.post(url, content=body, headers=headers)
        except httpx.InvalidURL as exc:
            raise PermanentError(f"the webhook's URL cannot be called: {exc}") from None
        except httpx.HTTPError as exc:
            raise DeliveryFailedError(
                f"the receiver could not be reached: {type(exc).__name__}"
            ) from None
        return response.status_code

    async def _check_resolves_public(self, url: str) -> None:
        parts = urlsplit(url)
        host = parts.hostname or ""
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, parts.port or 443, type=socket.SOCK_STREAM
            )
        except OSError:
            raise DeliveryFailedError(f"the receiver's name {host!r} does not resolve") from None
        if any(is_private(str(info[4][0])) for info in infos):
            raise PermanentError(
                f"the receiver's name {host!r} resolves to a private, loopback or link-local "
                "address, which webhooks do not reach"
            )

    async def close(self) -> None:
        await self._client.aclose()
