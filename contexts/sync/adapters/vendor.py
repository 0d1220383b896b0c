"""The vendor's HTTP client (httpx): 429 throttles, 5xx and network errors are
transient, any other 4xx is permanent and carries the vendor's reason."""

from typing import Any
from urllib.parse import quote

import httpx

from contexts.sync.adapters.settings import SyncSettings
from contexts.sync.application.ports import VendorItem, VendorPage
from jobrail.kernel.errors import PermanentError, ThrottledError, TransientError


class HttpVendorClient:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    @staticmethod
    def make_client(settings: SyncSettings, base_url: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=base_url.rstrip("/") + "/",
            timeout=httpx.Timeout(settings.read_timeout_s, connect=settings.connect_timeout_s),
        )

    async def fetch_page(self, account_id: str, cursor: str | None) -> VendorPage:
        params = {"cursor": cursor} if cursor else {}
        try:
            response = await self._client.get(
                f"accounts/{_segment(account_id)}/items", params=params
            )
        except httpx.HTTPError as exc:
            raise TransientError(f"vendor unreachable: {type(exc).__name__}: {exc}") from exc
        if response.status_code == 429:
            raise ThrottledError(
                "vendor throttled the call (429)",
                retry_after_s=_retry_after(response.headers.get("Retry-After")),
            )
        if response.status_code >= 500:
            raise TransientError(f"vendor error {response.status_code}")
        if response.status_code >= 400:
            raise PermanentError(
                f"vendor refused account {account_id}: {response.status_code} {_reason(response)}"
            )
        body: dict[str, Any] = response.json()
        pages = body.get("pages")
        page = VendorPage(
            items=[VendorItem(id=str(item["id"]), data=item) for item in body["items"]],
            next_cursor=body.get("next_cursor"),
            pages=pages if isinstance(pages, int) and pages > 0 else None,
        )
        _check_fits(page)
        return page


STORED_TEXT = 255  # an item's id and the cursor, as the sync tables store them


def _check_fits(page: VendorPage) -> None:
    """A page whose cursor or item ids the sync tables cannot store fails the sync with
    the reason, rather than with the database's error at the write."""
    if page.next_cursor is not None and len(page.next_cursor) > STORED_TEXT:
        raise PermanentError(f"vendor sent a cursor longer than {STORED_TEXT} characters")
    if any(len(item.id) > STORED_TEXT for item in page.items):
        raise PermanentError(f"vendor sent an item id longer than {STORED_TEXT} characters")


def _segment(account_id: str) -> str:
    """`account_id` as one URL path segment. The domain's pattern already keeps '/',
    '?', '#' and dot segments out; this holds for an id that did not pass it too. A
    segment of only "." or ".." is percent-encoded as well: quote() leaves dots alone,
    and httpx would resolve such a segment away (accounts/../items)."""
    segment = quote(account_id, safe="")
    return segment.replace(".", "%2E") if segment in {".", ".."} else segment


def _retry_after(value: str | None) -> float:
    try:
        return max(float(value), 0.1) if value else 1.0
    except ValueError:
        return 1.0


def _reason(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:200]
    if isinstance(body, dict):
        return str(body.get("error") or body.get("detail") or body)[:200]
    return str(body)[:200]
