"""A worker process's own metrics port and the metrics token: each worker process
serves ``metrics.worker_port`` plus its index (Taskiq names the processes it forks
``worker-0``, ``worker-1``, …, and a restarted process keeps its name, hence its
port); the API serves ``GET /metrics`` (``jobrail.runtime.metrics_endpoint``)."""

import asyncio
import hmac
import logging
import multiprocessing
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app as make_exposition_app

from jobrail.settings import MetricsSettings
from jobrail.telemetry.metrics import Metrics

log = logging.getLogger("jobrail.metrics")


def worker_index() -> int:
    """This worker process's index among its siblings (0 outside Taskiq's workers)."""
    prefix, _, number = multiprocessing.current_process().name.rpartition("-")
    return int(number) if prefix == "worker" and number.isdigit() else 0


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _ThreadingServer6(_ThreadingServer):
    address_family = socket.AF_INET6


class WorkerMetricsServer:
    """One worker process's metrics, on a port of its own (see the module docstring).

    It runs in a thread, so that a worker whose loop is busy or blocked still answers
    with its counters; only the backlog lookup needs the loop, and waits for it a
    bounded time."""

    def __init__(self, settings: MetricsSettings) -> None:
        self._settings = settings
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int | None:
        return None if self._server is None else self._server.server_port

    async def start(self, metrics: Metrics) -> None:
        """Listen, unless `worker_port` is 0. A port that cannot be had is logged, and
        the worker runs on without metrics rather than not at all."""
        if not self._settings.worker_port:
            return
        app = self._app(metrics, asyncio.get_running_loop())
        port = self._settings.worker_port + worker_index()
        host = self._settings.worker_host
        server_class = _ThreadingServer6 if ":" in host else _ThreadingServer
        try:
            if port > 65535:
                raise OSError(f"port {port} is out of range")
            self._server = make_server(host, port, app, server_class, handler_class=_QuietHandler)
        except OSError as exc:
            log.error("metrics: cannot listen on %s:%d (%s); no metrics here", host, port, exc)
            return
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="metrics-server", daemon=True
        )
        self._thread.start()
        log.info("metrics on http://%s:%d/metrics", host, port)

    async def stop(self) -> None:
        if self._server is None:
            return
        await asyncio.to_thread(self._server.shutdown)
        self._server.server_close()
        self._server = None

    def _app(
        self, metrics: Metrics, loop: asyncio.AbstractEventLoop
    ) -> Callable[..., Iterable[bytes]]:
        exposition: Callable[..., Iterable[bytes]] = make_exposition_app(metrics.registry)
        token = metrics_token(self._settings)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            if token is not None and not bearer_matches(environ.get("HTTP_AUTHORIZATION"), token):
                start_response(
                    "401 Unauthorized",
                    [("Content-Type", "text/plain"), ("WWW-Authenticate", "Bearer")],
                )
                return [b"metrics need the metrics token\n"]
            metrics.refresh_from(loop, self._settings.lookup_timeout_s * 2 + 1)
            return exposition(environ, start_response)

        return app


def metrics_token(settings: MetricsSettings) -> str | None:
    """The token scrapes must send, or None (an empty setting is none)."""
    token = settings.token.get_secret_value() if settings.token is not None else ""
    return token or None


def bearer_matches(authorization: str | None, token: str) -> bool:
    """Whether an Authorization header carries `token` (compared in constant time)."""
    scheme, _, given = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), token.encode())
