"""Webhooks: a tenant's URL that its job events are POSTed to, signed with its secret.

Signatures follow the Standard Webhooks specification (standardwebhooks.com), so a
receiver can check them with any of its libraries: the headers ``webhook-id`` (the
delivery's id, the same on every retry), ``webhook-timestamp`` (Unix seconds) and
``webhook-signature`` (``v1,`` and the base64 HMAC-SHA256, keyed with the secret's
bytes, of ``"{id}.{timestamp}.{body}"``). A secret is ``whsec_`` and base64.

A webhook reaches public addresses only. Which are not is decided from jobrail's own copy
of IANA's special-purpose address registries (jobrail.webhooks.special_addresses), not
from the running Python's ``ipaddress``, whose answers change between patch releases;
and every entry of those registries is refused, whatever its "Globally Reachable"
column says: a webhook has no business calling anycast infrastructure (AS112 sinks, AMT
relays, 6to4 relays, PCP and TURN anycast). NAT64's well-known prefix alone is judged by
the IPv4 address it carries. Multicast and IPv6 outside 2000::/3 are
refused too, as is an IPv6 address whose embedded IPv4 address is. Where private
addresses are allowed (development), the API's own address still is not, however it is
written or named.
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

from jobrail.events.feed import EventCursor
from jobrail.kernel.errors import InvalidInputError
from jobrail.kernel.ids import TenantId
from jobrail.webhooks.special_addresses import special_purpose_block

SECRET_PREFIX = "whsec_"  # noqa: S105 (a prefix, no secret)
MAX_URL_LENGTH = 2048
DEFAULT_EVENTS = ("succeeded", "failed", "cancelled", "expired")
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


IP = ipaddress.IPv4Address | ipaddress.IPv6Address

# NAT64's well-known prefix: 64:ff9b::a9fe:a9fe reaches 169.254.169.254.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# The deprecated IPv4-compatible addresses: ::127.0.0.1 (::7f00:1), which a socket may
# still reach.
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
# Multicast is in IANA's multicast registries, not the special-purpose ones.
_MULTICAST = (
    (ipaddress.ip_network("224.0.0.0/4"), "Multicast, 224.0.0.0/4, RFC 5771"),
    (ipaddress.ip_network("ff00::/8"), "Multicast, ff00::/8, RFC 4291"),
)
# IANA's IPv6 address space registry gives only 2000::/3 to global unicast: the rest is
# multicast, unique-local, link-local, the deprecated site-local fec0::/10, or held in
# reserve by the IETF.
_IPV6_GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")


def _embedded(ip: IP) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (IPv4-mapped, 6to4, NAT64 or
    IPv4-compatible), which is where a connection to it may end up."""
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    embedded = ip.ipv4_mapped or ip.sixtofour
    if embedded is None and (ip in _NAT64 or ip in _IPV4_COMPATIBLE):
        embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return embedded


def unreachable_because(address: str) -> str | None:
    """Why a webhook may not reach `address`, or None if it may.

    Decided by jobrail's own copy of IANA's special-purpose address registries
    (jobrail.webhooks.special_addresses), never by the running Python's
    ``is_private``/``is_global``, which differ between patch releases. Every entry of
    those registries is refused, whatever its "Globally Reachable" column says: the
    blocks marked True are anycast infrastructure (AS112 sinks, AMT, PCP and TURN
    relays), no receiver a tenant runs. The one exception is NAT64's well-known prefix
    (64:ff9b::/96), which is how a worker on an IPv6-only network (DNS64) reaches every
    IPv4 receiver: an address in it is judged by the IPv4 address it carries. Also
    refused: multicast, IPv6 outside 2000::/3, and an IPv6 address whose embedded IPv4
    address is refused."""
    ip = ipaddress.ip_address(address)
    if ip in _NAT64:
        carried = _embedded(ip)
        why = None if carried is None else unreachable_because(str(carried))
        return None if why is None else f"it carries {carried}: {why}"
    block = special_purpose_block(ip)
    if block is not None:
        return f"{block.name}, {block.prefix}, {block.rfc}"
    embedded = _embedded(ip)
    if embedded is not None:
        why = unreachable_because(str(embedded))
        if why is not None:
            return f"it carries {embedded}: {why}"
    for network, name in _MULTICAST:
        if ip in network:
            return name
    if isinstance(ip, ipaddress.IPv6Address) and ip not in _IPV6_GLOBAL_UNICAST:
        return "outside 2000::/3, the IPv6 global unicast space"
    return None


def is_private(address: str) -> bool:
    """Whether a webhook may not reach `address` (see unreachable_because): loopback,
    private, link-local (cloud metadata), multicast or any other special-purpose
    address, nothing a webhook reaches on the public internet."""
    return unreachable_because(address) is not None


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


# What a resolver answers with a loopback address without asking DNS: /etc/hosts'
# usual names, and every name under .localhost (RFC 6761).
_LOOPBACK_NAMES = frozenset(
    {
        "localhost",
        "localhost.localdomain",
        "localhost6",
        "localhost6.localdomain6",
        "ip6-localhost",
        "ip6-loopback",
    }
)
# Loopback, and the unspecified addresses, which Linux connects to the loopback: a
# connection to any of them stays on this machine.
_THIS_MACHINE = tuple(
    ipaddress.ip_network(n) for n in ("127.0.0.0/8", "0.0.0.0/32", "::1/128", "::/128")
)


def _is_loopback_name(host: str) -> bool:
    return host in _LOOPBACK_NAMES or host.endswith(".localhost")


def _host_ip(host: str) -> IP | None:
    """The address a host stands for without a lookup: its literal, or loopback for the
    names of this machine."""
    host = host.strip("[]").rstrip(".").lower()
    address = _address(host)
    if address is not None:
        return ipaddress.ip_address(address)
    return ipaddress.IPv4Address("127.0.0.1") if _is_loopback_name(host) else None


def _forms(ip: IP) -> set[IP]:
    """`ip`, and the IPv4 address it carries if it is an IPv6 address carrying one."""
    embedded = _embedded(ip)
    return {ip} if embedded is None else {ip, embedded}


def _on_this_machine(ip: IP) -> bool:
    return any(form in network for form in _forms(ip) for network in _THIS_MACHINE)


def reaches_api(address: str, port: int, own_hosts: Iterable[tuple[str, int]]) -> bool:
    """Whether a connection to `address`:`port` reaches this API, which is reached at
    `own_hosts` (host and port). An API on a loopback or wildcard address is reached
    through every loopback address (127.0.0.0/8, ::1), the unspecified ones and their
    IPv4-mapped forms, on its port; one on another address through that address."""
    ip = ipaddress.ip_address(address)
    for host, own_port in own_hosts:
        own_ip = _host_ip(host)
        if own_port != port or own_ip is None:
            continue
        if _on_this_machine(own_ip) and _on_this_machine(ip):
            return True
        if _forms(ip) & _forms(own_ip):
            return True
    return False


def _points_at_api(host: str, port: int, own_hosts: Iterable[tuple[str, int]]) -> bool:
    own = [(h.strip("[]").rstrip(".").lower(), p) for h, p in own_hosts]
    if (host, port) in own:
        return True
    ip = _host_ip(host)
    return ip is not None and reaches_api(str(ip), port, own)


def _host_and_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    host = (parts.hostname or "").rstrip(".").lower()
    return host, parts.port or (443 if parts.scheme == "https" else 80)


def lookup_of(url: str) -> tuple[str, int] | None:
    """The name a checked URL's receiver is looked up by, with its port; None if its
    host is an address or a name of this machine, which check_url judged itself."""
    host, port = _host_and_port(url)
    return None if _host_ip(host) is not None else (host, port)


def check_addresses(
    addresses: Iterable[str], port: int, own_hosts: Iterable[tuple[str, int]]
) -> None:
    """InvalidInputError if the addresses a URL's name resolves to include this API's
    own (see reaches_api) on the URL's port."""
    own = list(own_hosts)
    if any(reaches_api(address, port, own) for address in addresses):
        raise InvalidInputError("url points at this API itself: its host resolves to the API")


def check_url(url: str, *, private_ok: bool, own_hosts: Iterable[tuple[str, int]]) -> str:
    """`url` if a webhook may have it; InvalidInputError saying why not otherwise.

    Refused: anything but http(s); credentials in the URL (they would be logged and
    shown); a literal address or ``localhost`` that a webhook does not reach (see
    unreachable_because; unless `private_ok`); and the API itself (`own_hosts`: host and
    port it is reached at, however its address is written: ``127.1``, ``0x7f000001``,
    ``[::ffff:127.0.0.1]``, ``0``, ``localhost.``), which a delivery would otherwise
    call with the platform's own hands. A name is resolved and checked again at each
    delivery (and, with `private_ok`, for the API's address when it is registered)."""
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
    if _points_at_api(host, port, own_hosts):
        raise InvalidInputError("url points at this API itself")
    if not private_ok:
        if _is_loopback_name(host):
            raise InvalidInputError("url points at this machine (localhost)")
        address = _address(host)
        # A name is checked when it is resolved, at each delivery.
        why = None if address is None else unreachable_because(address)
        if why is not None:
            raise InvalidInputError(
                f"url points at {address} ({why}): webhooks reach public addresses only, "
                "not private, loopback, link-local or other special-purpose ones"
            )
    return url
