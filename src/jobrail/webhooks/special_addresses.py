"""IANA's special-purpose address registries, held here rather than asked of the running
Python: ``ipaddress``'s ``is_private`` and ``is_global`` follow these registries only as
far as the patch release goes (3.11.7 counts 192.0.0.8, the IPv4 dummy address, as
global), so what a webhook may reach would change with the interpreter.

Transcribed from the IANA IPv4 Special-Purpose Address Registry
(https://www.iana.org/assignments/iana-ipv4-special-registry/) and the IANA IPv6
Special-Purpose Address Registry
(https://www.iana.org/assignments/iana-ipv6-special-registry/) as published in October
2025: the IPv6 registry's last update is 2025-10-09 (its newest entry RFC 9780's dummy
prefix), and both hold 25 entries. Every entry is kept with its prefix, name, RFC and
"Globally Reachable" column, so that a later version can be compared line by line.

A webhook reaches none of these blocks, whatever their "Globally Reachable" column
says. Those marked True are anycast infrastructure (PCP and TURN anycast, AS112 sinks,
AMT relays, DNS-SD registration anycast), identifiers that are no host's address
(ORCHIDv2, drone DETs) or the NAT64 well-known prefix, and those marked N/A are tunnels
(Teredo, 6to4) to an address the URL could name itself: none is a receiver a tenant
runs. See jobrail.webhooks.domain.is_private for the whole rule.
"""

import ipaddress
from dataclasses import dataclass

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class SpecialPurposeBlock:
    prefix: IPNetwork
    name: str
    rfc: str
    globally_reachable: bool | None
    """The registry's column; None where it says N/A or, for a terminated entry, nothing."""


def _block(
    prefix: str, name: str, rfc: str, globally_reachable: bool | None
) -> SpecialPurposeBlock:
    return SpecialPurposeBlock(ipaddress.ip_network(prefix), name, rfc, globally_reachable)


IPV4_SPECIAL_PURPOSE = (
    _block("0.0.0.0/8", '"This network"', "RFC 791, Section 3.2", False),
    _block("0.0.0.0/32", '"This host on this network"', "RFC 1122, Section 3.2.1.3", False),
    _block("10.0.0.0/8", "Private-Use", "RFC 1918", False),
    _block("100.64.0.0/10", "Shared Address Space", "RFC 6598", False),
    _block("127.0.0.0/8", "Loopback", "RFC 1122, Section 3.2.1.3", False),
    _block("169.254.0.0/16", "Link Local", "RFC 3927", False),
    _block("172.16.0.0/12", "Private-Use", "RFC 1918", False),
    _block("192.0.0.0/24", "IETF Protocol Assignments", "RFC 6890, Section 2.1", False),
    _block("192.0.0.0/29", "IPv4 Service Continuity Prefix", "RFC 7335", False),
    _block("192.0.0.8/32", "IPv4 dummy address", "RFC 7600", False),
    _block("192.0.0.9/32", "Port Control Protocol Anycast", "RFC 7723", True),
    _block("192.0.0.10/32", "Traversal Using Relays around NAT Anycast", "RFC 8155", True),
    # One entry in the registry: "192.0.0.170/32, 192.0.0.171/32".
    _block("192.0.0.170/32", "NAT64/DNS64 Discovery", "RFC 8880, RFC 7050 Section 2.2", False),
    _block("192.0.0.171/32", "NAT64/DNS64 Discovery", "RFC 8880, RFC 7050 Section 2.2", False),
    _block("192.0.2.0/24", "Documentation (TEST-NET-1)", "RFC 5737", False),
    _block("192.31.196.0/24", "AS112-v4", "RFC 7535", True),
    _block("192.52.193.0/24", "AMT", "RFC 7450", True),
    # Terminated 2015-03: the registry leaves its columns empty.
    _block("192.88.99.0/24", "Deprecated (6to4 Relay Anycast)", "RFC 7526", None),
    _block("192.88.99.2/32", "6a44-relay anycast address", "RFC 6751", False),
    _block("192.168.0.0/16", "Private-Use", "RFC 1918", False),
    _block("192.175.48.0/24", "Direct Delegation AS112 Service", "RFC 7534", True),
    _block("198.18.0.0/15", "Benchmarking", "RFC 2544", False),
    _block("198.51.100.0/24", "Documentation (TEST-NET-2)", "RFC 5737", False),
    _block("203.0.113.0/24", "Documentation (TEST-NET-3)", "RFC 5737", False),
    _block("240.0.0.0/4", "Reserved", "RFC 1112, Section 4", False),
    _block("255.255.255.255/32", "Limited Broadcast", "RFC 8190, RFC 919 Section 7", False),
)

IPV6_SPECIAL_PURPOSE = (
    _block("::1/128", "Loopback Address", "RFC 4291", False),
    _block("::/128", "Unspecified Address", "RFC 4291", False),
    _block("::ffff:0:0/96", "IPv4-mapped Address", "RFC 4291", False),
    _block("64:ff9b::/96", "IPv4-IPv6 Translat.", "RFC 6052", True),
    _block("64:ff9b:1::/48", "IPv4-IPv6 Translat.", "RFC 8215", False),
    _block("100::/64", "Discard-Only Address Block", "RFC 6666", False),
    _block("100:0:0:1::/64", "Dummy IPv6 Prefix", "RFC 9780", False),
    _block("2001::/23", "IETF Protocol Assignments", "RFC 2928", False),
    _block("2001::/32", "TEREDO", "RFC 4380, RFC 8190", None),
    _block("2001:1::1/128", "Port Control Protocol Anycast", "RFC 7723", True),
    _block("2001:1::2/128", "Traversal Using Relays around NAT Anycast", "RFC 8155", True),
    _block("2001:1::3/128", "DNS-SD Service Registration Protocol Anycast", "RFC 9665", True),
    _block("2001:2::/48", "Benchmarking", "RFC 5180, RFC Errata 1752", False),
    _block("2001:3::/32", "AMT", "RFC 7450", True),
    _block("2001:4:112::/48", "AS112-v6", "RFC 7535", True),
    # Terminated 2014-03: the registry leaves its columns empty.
    _block("2001:10::/28", "Deprecated (previously ORCHID)", "RFC 4843", None),
    _block("2001:20::/28", "ORCHIDv2", "RFC 7343", True),
    _block("2001:30::/28", "Drone Remote ID Protocol Entity Tags (DETs) Prefix", "RFC 9374", True),
    _block("2001:db8::/32", "Documentation", "RFC 3849", False),
    _block("2002::/16", "6to4", "RFC 3056", None),
    _block("2620:4f:8000::/48", "Direct Delegation AS112 Service", "RFC 7534", True),
    _block("3fff::/20", "Documentation", "RFC 9637", False),
    _block("5f00::/16", "Segment Routing (SRv6) SIDs", "RFC 9602", False),
    _block("fc00::/7", "Unique-Local", "RFC 4193, RFC 8190", False),
    _block("fe80::/10", "Link-Local Unicast", "RFC 4291", False),
)

SPECIAL_PURPOSE = IPV4_SPECIAL_PURPOSE + IPV6_SPECIAL_PURPOSE


def special_purpose_block(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> SpecialPurposeBlock | None:
    """The most specific registry entry that holds `address` (192.0.0.9 is in
    192.0.0.0/24 and 192.0.0.9/32: the latter), or None."""
    blocks = [block for block in SPECIAL_PURPOSE if address in block.prefix]
    return max(blocks, key=lambda block: block.prefix.prefixlen, default=None)
