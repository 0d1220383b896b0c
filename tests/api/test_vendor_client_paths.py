"""The sync context's vendor client puts an account id into the vendor's URL as exactly
one path segment, whatever the id holds (the API refuses such ids already: this is the
second line, for ids that come from elsewhere, such as a job's stored payload)."""

from typing import Any

import httpx
import pytest

from contexts.sync.adapters.vendor import HttpVendorClient


class _Vendor:
    """A stand-in vendor (an ASGI app) that records the raw path of every call."""

    def __init__(self) -> None:
        self.raw_paths: list[bytes] = []
        self.paths: list[str] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.raw_paths.append(scope["raw_path"])
        self.paths.append(scope["path"])
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": b'{"items": []}'})


@pytest.mark.parametrize(
    "account_id", [".", "..", "../admin", "a/b", "a?x=1", "a#f", "a b", "a%2Fb", "acme.eu-1:7"]
)
async def test_an_account_id_is_one_path_segment_of_the_vendor_url(account_id: str) -> None:
    vendor = _Vendor()
    transport = httpx.ASGITransport(app=vendor)
    async with httpx.AsyncClient(transport=transport, base_url="http://vendor/v1/") as client:
        await HttpVendorClient(client).fetch_page(account_id, cursor=None)

    [raw] = vendor.raw_paths
    prefix, _, rest = raw.decode().partition("/v1/accounts/")
    segment, _, tail = rest.partition("/")
    assert prefix == ""
    assert tail == "items"
    assert segment not in {".", ".."}
    assert vendor.paths == [f"/v1/accounts/{account_id}/items"]
