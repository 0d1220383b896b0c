"""Webhooks' rules: the Standard Webhooks signature (the specification's own example),
the addresses a webhook never reaches, and a delivery sent to the very address that
was checked."""

import socket
from typing import Any

import pytest

from jobrail.kernel.errors import InvalidInputError, PermanentError
from jobrail.webhooks.domain import check_url, is_private, sign
from jobrail.webhooks.sending import HttpxWebhookSender


def test_the_signature_is_the_specifications() -> None:
    # standardwebhooks.com's example: secret, id, timestamp, body and signature.
    signature = sign(
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1614265330,
        b'{"test": 2432232314}',
    )
    assert signature == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


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


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"])
def test_public_addresses_are_reached(address: str) -> None:
    assert not is_private(address)


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
    with pytest.raises(InvalidInputError, match="private, loopback or link-local"):
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

    import asyncio

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", getaddrinfo, raising=False)


async def test_a_delivery_goes_to_the_address_that_was_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sender = HttpxWebhookSender(timeout_s=1, private_ok=False)
    _resolving_to(monkeypatch, "93.184.216.34")
    try:
        url, host = await sender._pinned("https://hooks.example.com:8443/in?x=1")
        assert url == "https://93.184.216.34:8443/in?x=1"
        assert host == "hooks.example.com:8443"
        url, host = await sender._pinned("http://hooks.example.com/in")
        assert (url, host) == ("http://93.184.216.34/in", "hooks.example.com")
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
