"""Looking a webhook's host name up when it is registered, with the system's resolver
(getaddrinfo: DNS, /etc/hosts), as each delivery looks it up.

A registration is an HTTP request: the lookup is bounded by a short timeout, and a name
that does not answer in it is taken as it is (each delivery looks it up again and
checks what it finds)."""

import asyncio
import socket

LOOKUP_TIMEOUT_S = 2.0


class GetaddrinfoResolver:
    def __init__(self, *, timeout_s: float = LOOKUP_TIMEOUT_S) -> None:
        self._timeout_s = timeout_s

    async def addresses(self, host: str, port: int) -> list[str]:
        try:
            async with asyncio.timeout(self._timeout_s):
                infos = await asyncio.get_running_loop().getaddrinfo(
                    host, port, type=socket.SOCK_STREAM
                )
        except (OSError, UnicodeError):  # TimeoutError is an OSError
            return []
        return list(dict.fromkeys(str(info[4][0]) for info in infos))
