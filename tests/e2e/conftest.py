"""The browser tests' Chromium (headless, driven through ChromeDriver) and the stack they
look at: an API process and a worker on the real services."""

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import BIN, ROOT, Process, start_worker
from tests.support.rabbit import RabbitProbe
from tests.support.servers import free_port
from tests.support.services import in_ci

ARTIFACTS = ROOT / "tests" / "artifacts"


def until(check: Callable[[], Any], what: str, timeout: float = 20) -> Any:
    """Poll `check` (a look at the browser's page) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        message = "Chromium and ChromeDriver are not installed (make install-browser)"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1280,900",
        f"--user-data-dir={tmp_path / 'chromium'}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def cli(env: dict[str, str], *args: str) -> Any:
    full = {k: v for k, v in os.environ.items() if not k.startswith("JOBRAIL_")}
    done = subprocess.run(
        [str(BIN / "jobrail"), *args],
        cwd=ROOT,
        env={**full, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


@pytest.fixture
def served(stack_env: dict[str, str], rabbit: RabbitProbe) -> Iterator[str]:
    port = free_port()
    api = Process(
        [str(BIN / "jobrail"), "api"], {**stack_env, "JOBRAIL_API__PORT": str(port)}, "api"
    )
    worker = start_worker(stack_env, name="worker")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        api.stop()
        worker.stop()
