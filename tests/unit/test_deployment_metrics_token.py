"""The compose stack runs the image in production, which serves metrics only with a token:
every jobrail service gets one, and Prometheus sends the same one to the API and workers."""

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
# No default: a well-known token would open production's metrics to anyone.
REQUIRED_TOKEN = (
    "${METRICS_TOKEN:?set METRICS_TOKEN (any long random string) in the environment or .env}"
)


def _yaml(path: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / path).read_text())
    return data


def test_the_image_runs_in_production_and_compose_gives_every_jobrail_service_the_token() -> None:
    dockerfile = (ROOT / "infra" / "Dockerfile").read_text()
    services = _yaml("docker-compose.yml")["services"]

    assert "JOBRAIL_ENVIRONMENT=production" in dockerfile
    tokens = {
        services[name]["environment"]["JOBRAIL_METRICS__TOKEN"]
        for name in ("api", "worker", "worker-heavy", "scheduler", "migrate")
    }
    assert tokens == {REQUIRED_TOKEN}


def test_prometheus_sends_the_same_token_to_the_api_and_the_workers() -> None:
    compose = _yaml("docker-compose.yml")
    scrape = _yaml("infra/prometheus/prometheus.yml")["scrape_configs"]
    [mount] = compose["services"]["prometheus"]["configs"]

    assert compose["configs"][mount["source"]]["content"] == REQUIRED_TOKEN
    for job in (j for j in scrape if j["job_name"].startswith("jobrail-")):
        assert job["authorization"] == {"type": "Bearer", "credentials_file": mount["target"]}
