"""POSTing a delivery to a receiver (httpx)."""

import asyncio
import ipaddress
import socket
from urllib.parse import urlsplit, urlunsplit

import httpx

from jobrail.kernel.errors import PermanentError
from jobrail.webhooks.domain import is_private
from jobrail.webhooks.ports import DeliveryFailedError


class HttpxWebhookSender:
    """One pooled client, which reads no proxy settings from the environment and follows
    no redirect (either could lead where the URL itself may not).

    Unless private addresses are allowed, the receiver's name is resolved here, every
    address it has is checked, and the request goes to the first of them (its name
    still in the Host header and the TLS server name, so the certificate is checked
    against it): resolving once and connecting to what was checked leaves no second
    lookup for a name to answer differently (DNS rebinding). A name with a loopback,
    private or link-local address is refused for good (PermanentError). The answer's
    body is never read. What a failure says stays coarse: the tenant reads it, and it
    must not map the network behind the worker."""

    def __init__(self, *, timeout_s: float, private_ok: bool) -> None:
        self._client = httpx.AsyncClient(
            timeout=timeout_s,
            follow_redirects=False,
            trust_env=False,
            limits=httpx.Limits(max_connections=50, max_keepalive_connections=10),
        )
        self._private_ok = private_ok

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> int:
        extensions: dict[str, str] = {}
        if not self._private_ok:
            url, host = await self._pinned(url)
            headers = {**headers, "host": host}
            extensions["sni_hostname"] = urlsplit(f"//{host}").hostname or host
        try:
            request = self._client.build_request(
                "POST", url, content=body, headers=headers, extensions=extensions
            )
            response = await self._client.send(request, stream=True)
            await response.aclose()  # the status is all a delivery needs
        except httpx.InvalidURL:
            raise PermanentError("the webhook's URL cannot be called") from None
        except httpx.TimeoutException:
            raise DeliveryFailedError("the receiver did not answer in time") from None
        except httpx.HTTPError:
            raise DeliveryFailedError("the receiver could not be reached") from None
        return response.status_code

    async def _pinned(self, url: str) -> tuple[str, str]:
        """`url` with its host replaced by the address it is sent to, and the Host
        header's value (the URL's host and port as written)."""
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
        addresses = [str(info[4][0]) for info in infos]
        if not addresses or any(is_private(address) for address in addresses):
            raise PermanentError("the receiver's name resolves to an address webhooks do not reach")
        address = addresses[0]
        literal = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
        netloc = f"{literal}:{parts.port}" if parts.port else literal
        host_header = parts.netloc.rpartition("@")[2]
        return urlunsplit(parts._replace(netloc=netloc)), host_header

    async def close(self) -> None:
        await self._client.aclose()
