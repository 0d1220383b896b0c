"""A sandbox vendor: a small real HTTP app with deterministic paged data.

- ``GET /accounts/{account_id}/items?cursor=`` pages through the account's items
  (each page says how many the account has, ``pages``).
  An account id containing ``pages-N`` has N pages (others have 3); one containing
  ``bad`` is refused with 400 and a reason; one containing ``flaky`` fails every
  other call with 503. An account id longer than the sync context accepts (255) or a
  cursor the sandbox did not make is refused with 400 and not recorded.
- Beyond ``rate_per_s`` calls in any second it answers 429 with ``Retry-After``.
- It records its calls: ``GET /_calls`` (and ``DELETE /_calls`` to forget them),
  including the most calls for one account it ever served at once.

It has no authentication (``/_calls`` lists every tenant's account ids, and anyone may
clear it), so the API serves it under ``/sandbox/vendor`` only in the embedded mode, or
in the stack mode when ``JOBRAIL_SYNC__SANDBOX=true`` outside production (production
refuses that switch; see ``contexts.sync``). Everything it remembers is bounded: the
last ``max_calls`` calls and the ``max_accounts`` accounts seen last, so a caller cannot
grow the process's memory however many or however odd its calls are. Tests run it on
its own port: ``python -m contexts.sync.adapters.sandbox --port 8100``.
"""

import argparse
import asyncio
import re
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse

from jobrail.kernel.keys import fitted

PAGES = re.compile(r"pages-(\d+)")
MAX_ACCOUNT_ID = 255  # what the sync context accepts (contexts/sync/adapters/api.py)
CURSOR = re.compile(r"p\d{1,9}")  # the sandbox's own cursors: "p<page>"


class RecentDict(OrderedDict[str, int]):
    """A dict that keeps only the `limit` keys written last. Hand-written: ten lines over
    OrderedDict, where a cache library would be a dependency for one bounded dict."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def __setitem__(self, key: str, value: int) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.limit:
            self.popitem(last=False)


@dataclass
class SandboxState:
    rate_per_s: int = 20
    page_size: int = 10
    page_delay_ms: int = 0
    max_calls: int = 1000
    max_accounts: int = 1000
    calls: deque[dict[str, Any]] = field(init=False)
    recent: deque[float] = field(default_factory=deque)
    in_flight: dict[str, int] = field(default_factory=dict)
    max_in_flight: RecentDict = field(init=False)
    flaky: RecentDict = field(init=False)
    refused: int = 0  # calls refused as malformed, never recorded

    def __post_init__(self) -> None:
        self.calls = deque(maxlen=self.max_calls)
        self.max_in_flight = RecentDict(self.max_accounts)
        self.flaky = RecentDict(self.max_accounts)

    def admit(self, now: float) -> bool:
        while self.recent and self.recent[0] <= now - 1.0:
            self.recent.popleft()
        if len(self.recent) >= self.rate_per_s:
            return False
        self.recent.append(now)
        return True


def pages_of(account_id: str) -> int:
    match = PAGES.search(account_id)
    return int(match.group(1)) if match else 3


def sandbox_router(state: SandboxState) -> APIRouter:
    router = APIRouter(include_in_schema=False)

    @router.get("/accounts/{account_id}/items")
    async def items(account_id: str, cursor: str | None = None) -> JSONResponse:
        if len(account_id) > MAX_ACCOUNT_ID or (cursor and not CURSOR.fullmatch(cursor)):
            state.refused += 1
            return JSONResponse({"error": "no such account or cursor"}, 400)
        admitted = state.admit(time.monotonic())
        call: dict[str, Any] = {"account_id": account_id, "cursor": cursor, "at": time.time()}
        state.calls.append(call)
        if not admitted:
            call["status"] = 429
            return JSONResponse({"error": "rate limited"}, 429, headers={"Retry-After": "1"})
        if "bad" in account_id:
            call["status"] = 400
            return JSONResponse({"error": f"account {account_id} is suspended"}, 400)
        if "flaky" in account_id:
            state.flaky[account_id] = state.flaky.get(account_id, 0) + 1
            if state.flaky[account_id] % 2:
                call["status"] = 503
                return JSONResponse({"error": "try again"}, 503)
        state.in_flight[account_id] = state.in_flight.get(account_id, 0) + 1
        state.max_in_flight[account_id] = max(
            state.max_in_flight.get(account_id, 0), state.in_flight[account_id]
        )
        try:
            if state.page_delay_ms:
                await asyncio.sleep(state.page_delay_ms / 1000)
            page = int(cursor[1:]) if cursor else 0
            total = pages_of(account_id)
            first = page * state.page_size
            body = {
                "items": [
                    # Named after the account, within what a vendor's id may be (255).
                    {"id": fitted(f"{account_id}-{n}"), "name": f"item {n}", "value": n}
                    for n in range(first, first + state.page_size)
                ],
                "next_cursor": f"p{page + 1}" if page + 1 < total else None,
                "pages": total,
            }
            call["status"] = 200
            return JSONResponse(body)
        finally:
            # Only accounts with a call under way stay here, so it is bounded by them.
            state.in_flight[account_id] -= 1
            if not state.in_flight[account_id]:
                del state.in_flight[account_id]

    @router.get("/_calls")
    async def calls() -> dict[str, Any]:
        return {"calls": list(state.calls), "max_in_flight": dict(state.max_in_flight)}

    @router.delete("/_calls")
    async def forget() -> dict[str, int]:
        forgotten = len(state.calls)
        state.calls.clear()
        state.max_in_flight.clear()
        return {"forgotten": forgotten}

    return router


def create_sandbox_app(state: SandboxState | None = None) -> FastAPI:
    app = FastAPI(title="sandbox vendor")
    app.include_router(sandbox_router(state or SandboxState()))
    return app


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description="the sandbox vendor")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--rate", type=int, default=20)
    parser.add_argument("--page-delay-ms", type=int, default=0)
    args = parser.parse_args()
    state = SandboxState(rate_per_s=args.rate, page_delay_ms=args.page_delay_ms)
    uvicorn.run(create_sandbox_app(state), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
