"""Webhooks: a tenant's URL that its job events are POSTed to, signed with its secret.

Signatures follow the Standard Webhooks specification (standardwebhooks.com), so a
receiver can check them with any of its libraries: the headers ``webhook-id`` (the
delivery's id, the same on every retry), ``webhook-timestamp`` (Unix seconds) and
``webhook-signature`` (``v1,`` and the base64 HMAC-SHA256, keyed with the secret's
bytes, of ``"{id}.{timestamp}.{body}"``). A secret is ``whsec_`` and base64.
"""

import base64
import hashlib
import hmac
import ipaddress
import re
import secrets
import socket
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from jobrail.jobs.feed import EventCursor
from jobrail.kernel.errors import InvalidInputError
from jobrail.kernel.ids import TenantId

SECRET_PREFIX = "whsec_"  # noqa: S105 (a prefix, no secret)
MAX_URL_LENGTH = 2048
DEFAULT_EVENTS = ("succeeded", "failed", "cancelled")
"""What a webhook receives unless it names its events: how each job ended."""


@dataclass(frozen=True, slots=True)
class Webhook:
    id: uuid.UUID
    tenant_id: TenantId
    url: str
    secret: str
    events: tuple[str, ...]
    created_at: datetime
    start: EventCursor
    """The feed's head when it was made: it receives the events after it."""

    def wants(self, event_name: str, at: EventCursor) -> bool:
        return event_name in self.events and at > self.start


def origin(url: str) -> str:
    """Where a webhook's deliveries go, as ``scheme://host[:port]``: what an operator may
    see of its URL, whose path or query can carry the receiver's token."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "(not a URL)"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def check_secret(secret: str) -> str:
    key = secret.removeprefix(SECRET_PREFIX)
    try:
        raw = base64.b64decode(key, validate=True)
    except ValueError:
        raw = b""
    if not secret.startswith(SECRET_PREFIX) or not 24 <= len(raw) <= 64:
        raise InvalidInputError(
            "secret must be whsec_ and the base64 of 24 to 64 random bytes; leave it out "
            "to have one made"
        )
    return secret


def sign(secret: str, delivery_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header's value."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{delivery_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def check_events(events: Iterable[str], known: Sequence[str]) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(events))
    unknown = [e for e in chosen if e not in known]
    if unknown or not chosen:
        raise InvalidInputError(
            f"events must name one or more of {', '.join(known)}"
            + (f"; unknown: {', '.join(unknown)}" if unknown else "")
        )
    return chosen


def is_private(address: str) -> bool:
    """Loopback, private, link-local (cloud metadata), multicast, reserved or
    unspecified: nothing a webhook reaches on the public internet."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = ip.ipv4_mapped or ip.sixtofour
        if embedded is None and (ip in _NAT64 or ip in _IPV4_COMPATIBLE):
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if embedded is not None:
            return is_private(str(embedded))
    return not ip.is_global or ip.is_multicast or ip.is_reserved


# NAT64's well-known prefix: 64:ff9b::a9fe:a9fe reaches 169.254.169.254.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# The deprecated IPv4-compatible addresses: ::127.0.0.1 (::7f00:1), which Python counts
# as global, and which a socket may still reach.
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


def _ascii(host: str) -> str | None:
    """`host` as a resolver reads it: IDNA-encoded (which folds full-width digits to
    ASCII), or None if it cannot be encoded."""
    try:
        return host if host.isascii() else host.encode("idna").decode("ascii")
    except UnicodeError:
        return None


def _address(host: str) -> str | None:
    """The address `host` is written as, if it is one: an IP literal, or one of the
    older IPv4 forms a resolver reads as an address (``127.1``, ``0x7f000001``,
    ``017700000001``), or either written with other digits (full-width ones, which IDNA
    folds to ASCII). A name: None."""
    ascii_host = _ascii(host)
    if ascii_host is None:
        return None
    try:
        return str(ipaddress.ip_address(ascii_host))
    except ValueError:
        pass
    if re.fullmatch(r"[0-9a-fx.]+", ascii_host):
        try:
            return socket.inet_ntoa(socket.inet_aton(ascii_host))
        except OSError:
            return None
    return None


_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
MAX_HOST_LENGTH = 253  # DNS: a name's length, without its final dot


def _is_host(host: str) -> bool:
    """An address, or a name DNS could hold: labels of 1-63 letters, digits and
    hyphens (not at either end), 253 characters in all, an internationalised name
    once IDNA-encoded. A URL past these rules was accepted and then failed at every
    delivery, in the resolver's IDNA encoding."""
    if _address(host) is not None:
        return True
    ascii_host = _ascii(host)
    if ascii_host is None:
        return False
    labels = ascii_host.split(".")
    # No top-level domain is all digits: `1.1.1.1.1` is a mistyped address, not a name.
    return (
        len(ascii_host) <= MAX_HOST_LENGTH
        and all(_LABEL.fullmatch(label) for label in labels)
        and not labels[-1].isdigit()
    )


def check_url(url: str, *, private_ok: bool, own_hosts: Iterable[tuple[str, int]]) -> str:
    """`url` if a webhook may have it; InvalidInputError saying why not otherwise.

    Refused: anything but http(s); credentials in the URL (they would be logged and
    shown); a literal address or ``localhost`` that is not public (unless
    `private_ok`); and the API itself (`own_hosts`: host and port it is reached at),
    which a delivery would otherwise call with the platform's own hands. A name is
    resolved and checked again at each delivery."""
    if len(url) > MAX_URL_LENGTH:
        raise InvalidInputError(f"url is longer than {MAX_URL_LENGTH} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise InvalidInputError("url is not a URL") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidInputError("url must be http:// or https://")
    if port == 0:
        raise InvalidInputError("url's port is 0: no receiver listens there")
    host = (parts.hostname or "").rstrip(".").lower()
    if not host:
        raise InvalidInputError("url has no host")
    if not _is_host(host):
        raise InvalidInputError("url's host is not a valid host name")
    if any(c <= " " or c == "\x7f" for c in url):
        # urlsplit drops CR, LF and tabs; the URL stored and shown would keep them.
        raise InvalidInputError("url must not contain spaces or control characters")
    if parts.username or parts.password:
        raise InvalidInputError("url must not hold credentials: use the secret")
    port = port or (443 if parts.scheme == "https" else 80)
    own = {(h.lower(), p) for h, p in own_hosts}
    loopback_names = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}  # noqa: S104 (a name)
    if (host, port) in own or (
        host in loopback_names | {"localhost.localdomain"}
        and any(h in loopback_names for h, p in own if p == port)
    ):
        raise InvalidInputError("url points at this API itself")
    if not private_ok:
        if host == "localhost" or host.endswith(".localhost"):
            raise InvalidInputError("url points at this machine (localhost)")
        address = _address(host)
        # A name is checked when it is resolved, at each delivery.
        if address is not None and is_private(address):
            raise InvalidInputError("url points at a private, loopback or link-local address")
    return url
