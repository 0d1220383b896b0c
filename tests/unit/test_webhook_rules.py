"""Webhooks' rules: the Standard Webhooks signature (the specification's own example),
the addresses a webhook never reaches (every entry of IANA's special-purpose registries,
as jobrail holds them, and multicast), the API's own address however it is written or
named, and a delivery sent to the very address that was checked."""

import asyncio
import socket
from datetime import UTC, datetime
from typing import Any

import pytest

from jobrail.events.feed import EventCursor
from jobrail.kernel.errors import InvalidInputError, PermanentError
from jobrail.kernel.ids import TenantId
from jobrail.webhooks.domain import Webhook, check_url, is_private, sign
from jobrail.webhooks.resolving import GetaddrinfoResolver
from jobrail.webhooks.sending import HttpxWebhookSender
from jobrail.webhooks.special_addresses import (
    IPV4_SPECIAL_PURPOSE,
    IPV6_SPECIAL_PURPOSE,
    SPECIAL_PURPOSE,
    SpecialPurposeBlock,
)
from jobrail.webhooks.use_cases import RegisterWebhookCommand, Webhooks


def test_the_signature_is_the_specifications() -> None:
    # standardwebhooks.com's example: secret, id, timestamp, body and signature.
    signature = sign(
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1614265330,
        b'{"test": 2432232314}',
    )
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


# The registries' address blocks, written out here apart from jobrail's table, so that
# an entry dropped from or changed in the table fails here.
REGISTRY_V4 = [
    "0.0.0.0/8",
    "0.0.0.0/32",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.0.0/29",
    "192.0.0.8/32",
    "192.0.0.9/32",
    "192.0.0.10/32",
    "192.0.0.170/32",
    "192.0.0.171/32",
    "192.0.2.0/24",
    "192.31.196.0/24",
    "192.52.193.0/24",
    "192.88.99.0/24",
    "192.88.99.2/32",
    "192.168.0.0/16",
    "192.175.48.0/24",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "240.0.0.0/4",
    "255.255.255.255/32",
]
REGISTRY_V6 = [
    "::1/128",
    "::/128",
    "::ffff:0:0/96",
    "64:ff9b::/96",
    "64:ff9b:1::/48",
    "100::/64",
    "100:0:0:1::/64",
    "2001::/23",
    "2001::/32",
    "2001:1::1/128",
    "2001:1::2/128",
    "2001:1::3/128",
    "2001:2::/48",
    "2001:3::/32",
    "2001:4:112::/48",
    "2001:10::/28",
    "2001:20::/28",
    "2001:30::/28",
    "2001:db8::/32",
    "2002::/16",
    "2620:4f:8000::/48",
    "3fff::/20",
    "5f00::/16",
    "fc00::/7",
    "fe80::/10",
]
# "Globally Reachable: True" in the registries: refused all the same.
GLOBALLY_REACHABLE = [
    "192.0.0.9/32",
    "192.0.0.10/32",
    "192.31.196.0/24",
    "192.52.193.0/24",
    "192.175.48.0/24",
    "64:ff9b::/96",
    "2001:1::1/128",
    "2001:1::2/128",
    "2001:1::3/128",
    "2001:3::/32",
    "2001:4:112::/48",
    "2001:20::/28",
    "2001:30::/28",
    "2620:4f:8000::/48",
]


def test_the_table_holds_every_registry_entry() -> None:
    assert [str(b.prefix) for b in IPV4_SPECIAL_PURPOSE] == REGISTRY_V4
    assert [str(b.prefix) for b in IPV6_SPECIAL_PURPOSE] == REGISTRY_V6
    assert {str(b.prefix) for b in SPECIAL_PURPOSE if b.globally_reachable} == set(
        GLOBALLY_REACHABLE
    )
    assert all(b.name and b.rfc.startswith("RFC ") for b in SPECIAL_PURPOSE)


def _first_middle_last(block: SpecialPurposeBlock) -> list[str]:
    network = block.prefix
    middle = network.network_address + network.num_addresses // 2
    return [str(a) for a in (network.network_address, middle, network.broadcast_address)]


def _literal(address: str) -> str:
    return f"[{address}]" if ":" in address else address


NAT64 = "64:ff9b::/96"  # judged by the IPv4 address it carries (below)


@pytest.mark.parametrize(
    "block", [b for b in SPECIAL_PURPOSE if str(b.prefix) != NAT64], ids=lambda b: str(b.prefix)
)
def test_every_special_purpose_entry_is_refused(block: SpecialPurposeBlock) -> None:
    # Whatever its "Globally Reachable" column says: first, middle and last address.
    for address in _first_middle_last(block):
        assert is_private(address), address
        with pytest.raises(InvalidInputError, match="public addresses only"):
            check_url(f"https://{_literal(address)}/hook", private_ok=False, own_hosts=())


def test_nat64_reaches_public_ipv4_receivers_only() -> None:
    """An IPv6-only worker behind DNS64 reaches every IPv4 receiver through 64:ff9b::/96."""
    assert NAT64 in {str(b.prefix) for b in SPECIAL_PURPOSE}
    assert not is_private("64:ff9b::808:808")  # 8.8.8.8
    assert check_url("https://[64:ff9b::808:808]/hook", private_ok=False, own_hosts=())
    for carried in ("127.0.0.1", "169.254.169.254", "10.0.0.1", "192.0.0.9", "0.0.0.0"):
        address = f"64:ff9b::{carried}"
        assert is_private(address), address
        with pytest.raises(InvalidInputError, match="public addresses only"):
            check_url(f"https://[{address}]/hook", private_ok=False, own_hosts=())


@pytest.mark.parametrize(
    "address",
    [
        # Counted as global by Python 3.11.7's ipaddress; registered and delivered to.
        "192.0.0.8",
        "192.0.0.9",
        "192.31.196.1",
        "192.52.193.1",
        "192.175.48.1",
        "192.88.99.1",
        "2001:1::1",
        "2620:4f:8000::1",
        "3fff::1",
        # Multicast, which the special-purpose registries do not list.
        "224.0.0.0",
        "224.0.0.1",
        "239.255.255.255",
        "ff02::1",
        "ff0e::1",
        # IPv6 outside 2000::/3: the deprecated site-local space, and the IETF's reserve.
        "fec0::1",
        "4000::1",
        "e000::1",
        # An IPv4-compatible address of a public one: ::/96 is no global unicast space.
        "::808:808",
    ],
)
def test_special_purpose_addresses_python_counts_as_global_are_refused(address: str) -> None:
    assert is_private(address)
    with pytest.raises(InvalidInputError, match="public addresses only"):
        check_url(f"http://{_literal(address)}/", private_ok=False, own_hosts=())


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "169.254.169.254",
        "::1",
        "fe80::1",
        "::ffff:127.0.0.1",
        "64:ff9b::a9fe:a9fe",  # NAT64 of the cloud metadata address
        "2002:a9fe:a9fe::1",  # 6to4 of it
        "0.0.0.0",
        "224.0.0.1",
        "::127.0.0.1",  # IPv4-compatible: Python counts it as global
        "::a9fe:a9fe",
        "100::1",  # reserved
    ],
)
def test_addresses_a_webhook_never_reaches(address: str) -> None:
    assert is_private(address)


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "9.9.9.9",
        "93.184.216.34",
        "208.67.222.222",
        "2606:4700:4700::1111",
        "2001:4860:4860::8888",
        "2620:fe::fe",
        "2606:2800:220:1:248:1893:25c8:1946",
        # Next to the special-purpose blocks, on either side.
        "9.255.255.255",
        "11.0.0.0",
        "100.63.255.255",
        "100.128.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "192.0.1.0",
        "192.31.195.255",
        "192.31.197.0",
        "192.52.192.255",
        "192.52.194.0",
        "192.88.98.255",
        "192.88.100.0",
        "192.175.47.255",
        "192.175.49.0",
        "198.17.255.255",
        "198.20.0.0",
        "223.255.255.255",
        "2001:200::1",
        "2003::1",
        "2620:4f:7fff:ffff:ffff:ffff:ffff:ffff",
        "2620:4f:8001::",
        "3ffe:ffff::1",
        "3fff:1000::",
    ],
)
def test_public_addresses_are_reached(address: str) -> None:
    assert not is_private(address)
    url = f"https://{_literal(address)}/hook"
    assert check_url(url, private_ok=False, own_hosts=()) == url


@pytest.mark.parametrize(
    "host",
    [
        "127.1",
        "0x7f000001",
        "017700000001",
        "0x7f.1",
        "2130706433",
        "\uff11\uff12\uff17.\uff10.\uff10.\uff11",  # full-width digits
        "\uff11\uff12\uff17\uff0e\uff10\uff0e\uff10\uff0e\uff11",  # and dots
        "169.254.43518",  # the cloud metadata address
        "[::127.0.0.1]",
        "[::ffff:a9fe:a9fe]",
    ],
)
def test_a_private_address_written_another_way_is_refused(host: str) -> None:
    with pytest.raises(InvalidInputError, match="public addresses only"):
        check_url(f"http://{host}/hook", private_ok=False, own_hosts=())


@pytest.mark.parametrize("host", ["8.8.8.8", "0x8080808", "8.8.2056", "cafe.example", "0xcafe.de"])
def test_public_addresses_and_names_that_look_numeric_pass(host: str) -> None:
    url = f"https://{host}/hook"
    assert check_url(url, private_ok=False, own_hosts=()) == url


@pytest.mark.parametrize(
    ("url", "why"),
    [("https://example.com:0/hook", "port is 0"), ("https://1.1.1.1.1/hook", "host")],
)
def test_a_url_no_receiver_could_answer_is_refused(url: str, why: str) -> None:
    with pytest.raises(InvalidInputError, match=why):
        check_url(url, private_ok=True, own_hosts=())


def test_a_host_that_is_no_name_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="host"):
        check_url("http://exa mple.com/", private_ok=True, own_hosts=())


@pytest.mark.parametrize(
    "url",
    [
        "https://" + "a" * 64 + ".com/",  # a label longer than DNS allows
        "https://a..b.com/",  # an empty label
        "https://-a.com/",
        "https://a-.com/",
        "https://" + ".".join(["a" * 60] * 5) + "/",  # a name longer than 253
        "https://ex\u00e4mple..com/",  # an internationalised name with an empty label
    ],
)
def test_a_host_no_lookup_could_resolve_is_refused(url: str) -> None:
    # Each of these went through and failed at every delivery (an IDNA UnicodeError).
    with pytest.raises(InvalidInputError, match="host"):
        check_url(url, private_ok=True, own_hosts=())


@pytest.mark.parametrize(
    "url",
    [
        "https://example.com/\r\nX-Injected: 1",
        "https://example.com/a b",
        "https://example.com/\x00",
    ],
)
def test_control_characters_and_spaces_in_a_url_are_refused(url: str) -> None:
    with pytest.raises(InvalidInputError, match="control characters"):
        check_url(url, private_ok=True, own_hosts=())


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/in",
        "https://a-b.example.co.uk:8443/x?y=1",
        "https://" + "a" * 63 + ".com/",
        "https://b\u00fccher.example/",
    ],
)
def test_valid_hosts_pass(url: str) -> None:
    assert check_url(url, private_ok=True, own_hosts=()) == url


async def test_a_stored_url_whose_name_cannot_be_encoded_fails_for_good() -> None:
    # A webhook registered before its host was checked this strictly: the delivery
    # fails permanently with a short reason, not with an IDNA traceback every attempt.
    sender = HttpxWebhookSender(timeout_s=1, private_ok=False)
    try:
        with pytest.raises(PermanentError, match="cannot be called"):
            await sender._pinned("https://" + "a" * 64 + ".com/")
    finally:
        await sender.close()


def _resolving_to(monkeypatch: pytest.MonkeyPatch, *addresses: str) -> None:
    async def getaddrinfo(host: str, port: int, **_: Any) -> list[Any]:
        family = socket.AF_INET6
        return [
            (socket.AF_INET if ":" not in a else family, socket.SOCK_STREAM, 6, "", (a, port))
            for a in addresses
        ]

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", getaddrinfo, raising=False)


async def test_a_delivery_goes_to_the_address_that_was_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sender = HttpxWebhookSender(timeout_s=1, private_ok=False)
    _resolving_to(monkeypatch, "93.184.216.34")
    try:
        [(url, host)] = await sender._pinned("https://hooks.example.com:8443/in?x=1")
        assert url == "https://93.184.216.34:8443/in?x=1"
        assert host == "hooks.example.com:8443"
        assert await sender._pinned("http://hooks.example.com/in") == [
            ("http://93.184.216.34/in", "hooks.example.com")
        ]
    finally:
        await sender.close()


async def test_a_name_with_one_private_address_is_refused_for_good(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sender = HttpxWebhookSender(timeout_s=1, private_ok=False)
    _resolving_to(monkeypatch, "93.184.216.34", "169.254.169.254")
    try:
        with pytest.raises(PermanentError, match="do not reach"):
            await sender.post("https://rebind.example.com/", b"{}", {})
    finally:
        await sender.close()


# The API's own address, which the development mode (private addresses allowed) still
# refuses, written every way a resolver reads it: the API listening on port 8000 of a
# loopback or wildcard address, or reached by a name of this machine.
OWN_ADDRESS_SPELLINGS = [
    "127.0.0.1",
    "127.1",
    "0x7f000001",
    "017700000001",
    "2130706433",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "[::127.0.0.1]",
    "0",
    "0.0.0.0",
    "127.0.0.2",
    "127.255.255.254",
    "[::1]",
    "[::]",
    "localhost",
    "localhost.",
    "LOCALHOST",
    "localhost6",
    "localhost.localdomain",
    "ip6-localhost",
    "api.localhost",
    "\uff11\uff12\uff17.\uff10.\uff10.\uff12",  # full-width digits
]


@pytest.mark.parametrize("host", OWN_ADDRESS_SPELLINGS)
@pytest.mark.parametrize(
    "own",
    [("127.0.0.1", 8000), ("0.0.0.0", 8000), ("::", 8000), ("localhost", 8000), ("::1", 8000)],
    ids=["loopback", "wildcard", "ipv6-wildcard", "localhost", "ipv6-loopback"],
)
def test_the_apis_own_address_is_refused_however_written(host: str, own: tuple[str, int]) -> None:
    with pytest.raises(InvalidInputError, match="this API itself"):
        check_url(f"http://{host}:8000/hook", private_ok=True, own_hosts=[own])


@pytest.mark.parametrize("host", OWN_ADDRESS_SPELLINGS)
def test_another_port_on_loopback_is_no_api(host: str) -> None:
    url = f"http://{host}:9000/hook"
    assert check_url(url, private_ok=True, own_hosts=[("127.0.0.1", 8000)]) == url


def test_an_api_on_another_address_is_refused_there_only() -> None:
    own = [("10.0.0.5", 8000)]
    for url in ("http://10.0.0.5:8000/", "http://[::ffff:a00:5]:8000/", "http://167772165:8000/"):
        with pytest.raises(InvalidInputError, match="this API itself"):
            check_url(url, private_ok=True, own_hosts=own)
    assert check_url("http://127.0.0.1:8000/", private_ok=True, own_hosts=own)


class FakeResolver:
    def __init__(self, names: dict[str, list[str]]) -> None:
        self.names = names
        self.asked: list[tuple[str, int]] = []

    async def addresses(self, host: str, port: int) -> list[str]:
        self.asked.append((host, port))
        return self.names.get(host, [])


class FakeStore:
    def __init__(self) -> None:
        self.added: list[Webhook] = []

    async def add(self, webhook: Webhook, *, at_most: int) -> bool:
        self.added.append(webhook)
        return True


class FakeEvents:
    async def head(self) -> EventCursor:
        return EventCursor(0, 0)


class FixedClock:
    def now(self) -> datetime:
        return datetime(2026, 1, 1, tzinfo=UTC)


def _webhooks(resolver: FakeResolver, store: FakeStore, *, private_ok: bool = True) -> Webhooks:
    return Webhooks(
        store,  # type: ignore[arg-type]
        FakeEvents(),  # type: ignore[arg-type]
        FixedClock(),
        resolver,
        private_ok=private_ok,
        own_hosts=[("0.0.0.0", 8000)],  # JOBRAIL_API__HOST and __PORT
    )


def _register(url: str) -> RegisterWebhookCommand:
    return RegisterWebhookCommand(TenantId("demo"), url, own_hosts=[("api.test", 443)])


@pytest.mark.parametrize(
    "addresses",
    [["127.0.0.1"], ["::1"], ["93.184.216.34", "127.0.1.1"], ["::ffff:127.0.0.1"], ["0.0.0.0"]],
)
async def test_a_name_that_resolves_to_the_api_is_refused_at_registration(
    addresses: list[str],
) -> None:
    # A name in /etc/hosts, or one a name server answers with loopback.
    resolver = FakeResolver({"dev-box.test": addresses})
    store = FakeStore()
    with pytest.raises(InvalidInputError, match="this API itself"):
        await _webhooks(resolver, store).register(_register("http://dev-box.test:8000/hook"))
    assert resolver.asked == [("dev-box.test", 8000)]
    assert store.added == []


async def test_a_name_on_loopback_elsewhere_or_unresolved_is_registered() -> None:
    resolver = FakeResolver({"dev-box.test": ["127.0.0.1"]})
    store = FakeStore()
    hooks = _webhooks(resolver, store)
    await hooks.register(_register("http://dev-box.test:9000/hook"))
    # Not resolving now: each delivery looks it up again and checks it.
    await hooks.register(_register("http://not-yet.test:8000/hook"))
    # The API's own names and addresses are refused without a lookup.
    with pytest.raises(InvalidInputError, match="this API itself"):
        await hooks.register(_register("http://localhost6:8000/hook"))
    with pytest.raises(InvalidInputError, match="this API itself"):
        await hooks.register(_register("https://api.test/hook"))
    assert [w.url for w in store.added] == [
        "http://dev-box.test:9000/hook",
        "http://not-yet.test:8000/hook",
    ]
    assert resolver.asked == [("dev-box.test", 9000), ("not-yet.test", 8000)]


async def test_without_private_addresses_a_name_is_checked_at_delivery() -> None:
    resolver = FakeResolver({"hooks.example.com": ["93.184.216.34"]})
    store = FakeStore()
    await _webhooks(resolver, store, private_ok=False).register(
        _register("https://hooks.example.com/in")
    )
    assert resolver.asked == []
    assert len(store.added) == 1


async def test_a_name_that_does_not_resolve_has_no_addresses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def unknown(*_: Any, **__: Any) -> list[Any]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", unknown, raising=False)
    assert await GetaddrinfoResolver().addresses("not-yet.test", 80) == []


async def test_a_lookup_that_does_not_answer_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    async def never(*_: Any, **__: Any) -> list[Any]:
        await asyncio.Event().wait()
        return []

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", never, raising=False)
    async with asyncio.timeout(30):  # the resolver's own timeout ends it long before
        assert await GetaddrinfoResolver(timeout_s=0.05).addresses("slow.test", 80) == []


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1"])
async def test_a_delivery_to_a_name_resolving_to_the_api_is_refused_for_good(
    monkeypatch: pytest.MonkeyPatch, address: str
) -> None:
    sender = HttpxWebhookSender(timeout_s=1, private_ok=True, own_hosts=[("127.0.0.1", 8000)])
    _resolving_to(monkeypatch, "10.0.0.9", address)
    try:
        with pytest.raises(PermanentError, match="this API itself"):
            await sender.post("http://dev-box.test:8000/hook", b"{}", {})
        # The same name on another port is a receiver on this machine.
        assert await sender._pinned("http://dev-box.test:9000/hook") == [
            ("http://10.0.0.9:9000/hook", "dev-box.test:9000"),
            (f"http://{_literal(address)}:9000/hook", "dev-box.test:9000"),
        ]
    finally:
        await sender.close()
