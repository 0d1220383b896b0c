"""POSTing a delivery to a receiver (httpx)."""

import asyncio
import contextlib
import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

import httpx

from jobrail.kernel.errors import PermanentError
from jobrail.telemetry.instruments import Instruments
from jobrail.webhooks.domain import is_private, reaches_api
from jobrail.webhooks.ports import DeliveryFailedError


class HttpxWebhookSender:
    """One pooled client, which reads no proxy settings from the environment and follows
    no redirect (either could lead where the URL itself may not).

    The receiver's name is resolved here, every address it has is checked, and the
    request goes to the first of them (the next one if that refuses the connection), its
    name still in the Host header and the TLS server name, so the certificate is checked
    against it: resolving once and connecting to what was checked leaves no second
    lookup for a name to answer differently (DNS rebinding). A name with an address a
    webhook does not reach (jobrail.webhooks.domain.is_private) is refused for good
    (PermanentError); where private addresses are allowed (development), one with the
    API's own address and port (`own_hosts`, where the API listens) is. The answer's
    body is never read. What a failure says stays coarse: the tenant reads it, and it
    must not map the network behind the worker."""

    def __init__(
        self,
        *,
        timeout_s: float,
        private_ok: bool,
        own_hosts: Iterable[tuple[str, int]] = (),
        instruments: Instruments | None = None,
    ) -> None:
        self._client = httpx.AsyncClient(
            timeout=timeout_s,
            follow_redirects=False,
            trust_env=False,
            limits=httpx.Limits(max_connections=50, max_keepalive_connections=10),
        )
        if instruments is not None:
            instruments.http_client(self._client)
        self._private_ok = private_ok
        self._own_hosts = tuple(own_hosts)

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> int:
        *others, last = await self._pinned(url)
        try:
            for pinned in others:
                with contextlib.suppress(httpx.ConnectError):
                    return await self._send(pinned, body, headers)
            return await self._send(last, body, headers)
        except httpx.InvalidURL:
            raise PermanentError("the webhook's URL cannot be called") from None
        except httpx.TimeoutException:
            raise DeliveryFailedError("the receiver did not answer in time") from None
        except httpx.HTTPError:
            raise DeliveryFailedError("the receiver could not be reached") from None

    async def _send(self, pinned: tuple[str, str], body: bytes, headers: dict[str, str]) -> int:
        url, host = pinned
        request = self._client.build_request(
            "POST",
            url,
            content=body,
            headers={**headers, "host": host},
            extensions={"sni_hostname": urlsplit(f"//{host}").hostname or host},
        )
        response = await self._client.send(request, stream=True)
        await response.aclose()  # the status is all a delivery needs
        return response.status_code

    async def _pinned(self, url: str) -> list[tuple[str, str]]:
        """`url` with its host replaced by each address it resolves to, in the
        resolver's order, each with the Host header's value (the URL's host and port as
        written)."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM
            )
        except UnicodeError:
            # A name IDNA cannot encode (a label empty or over 63): no lookup ever will.
            # check_url refuses these now; a webhook stored before it did ends here.
            raise PermanentError("the webhook's URL cannot be called") from None
        except OSError:
            raise DeliveryFailedError("the receiver's name does not resolve") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        if not addresses or (
            not self._private_ok and any(is_private(address) for address in addresses)
        ):
            raise PermanentError("the receiver's name resolves to an address webhooks do not reach")
        if self._private_ok and any(reaches_api(a, port, self._own_hosts) for a in addresses):
            raise PermanentError("the receiver's name resolves to this API itself")
        host_header = parts.netloc.rpartition("@")[2]
        return [
            (urlunsplit(parts._replace(netloc=_netloc(address, parts.port))), host_header)
            for address in addresses
        ]

    async def close(self) -> None:
        await self._client.aclose()


def _netloc(address: str, port: int | None) -> str:
    literal = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    return f"{literal}:{port}" if port else literal
