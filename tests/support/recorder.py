"""A small HTTP server on loopback that records every call it gets, with its time."""

import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse


@dataclass(frozen=True)
class Call:
    at: float
    params: dict[str, str]
    wall: float = 0.0
    key: str | None = None


class Recorder:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.active = 0
        self.max_active = 0
        self._lock = threading.Lock()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                params = {k: v[0] for k, v in parse_qs(urlparse(self.path).query).items()}
                key = self.headers.get("Idempotency-Key")
                with recorder._lock:
                    recorder.calls.append(Call(time.monotonic(), params, time.time(), key))
                    if params.get("phase") == "start":
                        recorder.active += 1
                        recorder.max_active = max(recorder.max_active, recorder.active)
                    elif params.get("phase") == "end":
                        recorder.active -= 1
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def effects(self) -> dict[str, int]:
        """Calls per idempotency key: how many times each effect was asked for."""
        counts: dict[str, int] = {}
        for call in list(self.calls):
            if call.key is not None:
                counts[call.key] = counts.get(call.key, 0) + 1
        return counts

    def __enter__(self) -> "Recorder":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
