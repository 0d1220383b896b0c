"""docker-compose.yml and the Dockerfile cannot be run here (no Docker engine), so their
shape is checked instead: one image, a role per command, services that are waited for."""

import json
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def test_api_workers_and_migrations_run_from_one_image_with_different_commands() -> None:
    services = _compose()["services"]
    roles = {name: services[name] for name in ("api", "worker", "worker-heavy", "migrate")}

    assert {s["image"] for s in roles.values()} == {"jobrail:latest"}
    assert {s["build"]["dockerfile"] for s in roles.values()} == {"infra/Dockerfile"}
    assert roles["api"]["command"] == ["jobrail", "api"]
    assert roles["worker"]["command"] == ["jobrail", "worker"]
    assert roles["migrate"]["command"] == ["jobrail", "migrate"]
    assert roles["worker-heavy"]["environment"]["JOBRAIL_WORKER__QUEUES"] == "jobs.heavy"


def test_the_stack_services_are_healthy_before_jobrail_starts() -> None:
    services = _compose()["services"]

    for backing in ("postgres", "rabbitmq", "redis"):
        assert "healthcheck" in services[backing]
    for role in ("api", "worker"):
        depends = services[role]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully"
        assert {depends[s]["condition"] for s in ("postgres", "rabbitmq", "redis")} == {
            "service_healthy"
        }


def test_jobrail_services_point_at_the_compose_services() -> None:
    env = _compose()["services"]["api"]["environment"]

    assert env["JOBRAIL_MODE"] == "stack"
    assert "@postgres:5432/" in env["JOBRAIL_DATABASE__URL"]
    assert "@rabbitmq:5672/" in env["JOBRAIL_RABBIT__URL"]
    assert env["JOBRAIL_REDIS__URL"].startswith("redis://redis:6379")


def test_the_image_is_multi_stage_and_runs_as_a_non_root_user() -> None:
    lines = (ROOT / "infra" / "Dockerfile").read_text().splitlines()
    stages = [line for line in lines if line.startswith("FROM ")]
    users = [line.split()[1] for line in lines if line.startswith("USER ")]

    assert len(stages) >= 2
    assert users
    assert users[-1] not in {"root", "0"}


SERIES = [
    "jobs_enqueued_total",
    "jobs_succeeded_total",
    "jobs_failed_total",
    "jobs_retried_total",
    "job_runtime_seconds",
    "job_time_to_start_seconds",
    "job_time_to_complete_seconds",
    "queue_depth",
    "dlq_depth",
    "outbox_lag_seconds",
    "limit_admitted_total",
    "limit_deferred_total",
    "lock_contention_total",
    "lock_lost_total",
    "api_rate_limited_total",
    "http_requests_total",
    "http_request_duration_seconds",
]
# prometheus_client's process series and RabbitMQ's own (its scrape job).
OTHER_SERIES = [
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_open_fds",
    "python_gc_collections_total",
    "rabbitmq_queue_messages_ready",
    "rabbitmq_consumers",
]


def test_the_scheduler_runs_from_the_same_image_after_migrations() -> None:
    scheduler = _compose()["services"]["scheduler"]

    assert scheduler["image"] == "jobrail:latest"
    assert scheduler["command"] == ["jobrail", "scheduler"]
    assert scheduler["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_prometheus_and_grafana_are_optional_and_wired_to_jobrail() -> None:
    services = _compose()["services"]
    scrape = yaml.safe_load((ROOT / "infra" / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in scrape["scrape_configs"]}
    plugins = (ROOT / "infra" / "rabbitmq" / "enabled_plugins").read_text()

    assert services["prometheus"]["profiles"] == ["observability"]
    assert services["grafana"]["profiles"] == ["observability"]
    assert jobs["jobrail-api"]["static_configs"][0]["targets"] == ["api:8000"]
    assert jobs["jobrail-worker"]["dns_sd_configs"][0]["port"] == 9100
    assert {
        s["environment"]["JOBRAIL_METRICS__WORKER_PORT"]
        for s in (services["worker"], services["worker-heavy"])
    } == {"9100"}
    assert "rabbitmq_prometheus" in plugins
    assert "rabbitmq_management" in plugins


def test_the_grafana_dashboard_charts_every_jobrail_series() -> None:
    dashboard = json.loads((ROOT / "infra" / "grafana" / "dashboards" / "jobrail.json").read_text())
    expressions = " ".join(
        target["expr"] for panel in dashboard["panels"] for target in panel["targets"]
    )

    missing = [name for name in SERIES if f"jobrail_{name}" not in expressions]
    assert missing == []
    assert [name for name in OTHER_SERIES if name not in expressions] == []
