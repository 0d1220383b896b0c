"""The alert rules in infra/prometheus, checked and unit-tested by promtool (Debian's
``prometheus`` package: ``make install-promtool``). Without promtool these tests skip,
and with CI=true they fail."""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.services import in_ci

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "infra" / "prometheus"


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    promtool = shutil.which("promtool")
    if promtool is None:
        message = "promtool is not installed (make install-promtool)"
        if in_ci():
            pytest.fail(message + " (CI=true: these tests may not skip)")
        pytest.skip(message)
    return subprocess.run(
        [promtool, *args], cwd=PROMETHEUS, capture_output=True, text=True, timeout=120
    )


def test_the_alert_rules_are_valid() -> None:
    checked = _promtool("check", "rules", "alerts.yml")

    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_alert_rules_fire_as_their_unit_tests_expect() -> None:
    tested = _promtool("test", "rules", "alerts.test.yml")

    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_prometheus_loads_the_rules_and_every_rule_has_a_unit_test() -> None:
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    rules = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    tests = yaml.safe_load((PROMETHEUS / "alerts.test.yml").read_text())
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())

    assert config["rule_files"] == ["alerts.yml"]
    mounts = compose["services"]["prometheus"]["volumes"]
    assert "./infra/prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro" in mounts
    alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    tested = {case["alertname"] for test in tests["tests"] for case in test["alert_rule_test"]}
    assert alerts == tested
    assert {"JobrailWorkersGone", "JobrailQueueHasNoConsumers", "JobrailOutboxLagging"} <= alerts
