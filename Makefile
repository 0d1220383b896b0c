# Targets that need Python create and use .venv/ in the project root.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STACK_ENV := JOBRAIL_MODE=stack \
	JOBRAIL_DATABASE__URL=$${JOBRAIL_DATABASE__URL:-postgresql+asyncpg://postgres@127.0.0.1:5432/jobrail} \
	JOBRAIL_RABBIT__URL=$${JOBRAIL_RABBIT__URL:-amqp://guest:guest@127.0.0.1:5672/} \
	JOBRAIL_REDIS__URL=$${JOBRAIL_REDIS__URL:-redis://127.0.0.1:6379/0} \
	JOBRAIL_SYNC__SANDBOX=$${JOBRAIL_SYNC__SANDBOX:-true}
QUEUES ?=
# The reference application (contexts/, workers/) that these targets run: jobrail with
# its billing, sync and notifications contexts (see workers/app.py).
APP ?= workers.app:rail

install-bench: $(VENV)/.installed-bench

$(VENV)/.installed-bench: pyproject.toml requirements.lock | $(BIN)/python
	$(BIN)/pip install --quiet -c requirements.lock -e '.[dev,bench]'
	touch $@ $(VENV)/.installed $(VENV)/.installed-dev

.PHONY: help install install-dev install-bench lock bench run run-stack api worker scheduler migrate migrate-stack test test-faults test-faults-dispatch test-unit install-browser install-promtool install-pgbouncer test-pgbouncer check-alerts lint format docs docs-check clean

help:
	@echo "make run        embedded mode on http://127.0.0.1:8000 (no services needed)"
	@echo "make run-stack  API, worker and scheduler on Postgres, RabbitMQ and Redis (URLs from env)"
	@echo "make api | worker [QUEUES=jobs.default,jobs.high] | scheduler | migrate"
	@echo "make test       lint, then every test against the real services"
	@echo "make test-faults the fault-injection suite (kills, restarts of RabbitMQ, Redis, Postgres)"
	@echo "make test-faults-dispatch the same with fair dispatch on"
	@echo "make test-pgbouncer integration tests through PgBouncer in transaction mode"
	@echo "make lint       ruff, mypy (strict) and import-linter"
	@echo "make check-alerts promtool's check and unit tests of infra/prometheus/alerts.yml"
	@echo "make docs       the documentation site into site/ (mkdocs build --strict)"
	@echo "make bench      jobrail beside raw aio-pika, raw Taskiq, a Celery pipeline and plain"
	@echo "                FastAPI + Taskiq API peers (python -m bench.run --api-only: the API alone),"
	@echo "                and what a batch and progress reports cost (--costs-only: those alone),"
	@echo "                and fair dispatch against plain (python -m bench.fair_dispatch: alone)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml requirements.lock | $(BIN)/python
	$(BIN)/pip install --quiet -c requirements.lock -e '.[reference]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml requirements.lock | $(BIN)/python
	$(BIN)/pip install --quiet -c requirements.lock -e '.[dev]'
	touch $@ $(VENV)/.installed

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

run: install
	JOBRAIL_MODE=embedded $(BIN)/jobrail run --app $(APP)

run-stack: install migrate-stack
	@$(STACK_ENV) $(BIN)/jobrail worker --app $(APP) & worker=$$!; \
	$(STACK_ENV) $(BIN)/jobrail scheduler --app $(APP) & scheduler=$$!; \
	$(STACK_ENV) $(BIN)/jobrail api --app $(APP) & api=$$!; \
	trap 'kill -TERM $$worker $$scheduler $$api 2>/dev/null; wait' INT TERM; \
	wait

api: install
	$(STACK_ENV) $(BIN)/jobrail api --app $(APP)

worker: install
	$(STACK_ENV) JOBRAIL_WORKER__QUEUES=$(QUEUES) $(BIN)/jobrail worker --app $(APP)

scheduler: install
	$(STACK_ENV) $(BIN)/jobrail scheduler --app $(APP)

migrate: install
	$(BIN)/jobrail migrate --app $(APP)

migrate-stack: install
	$(STACK_ENV) $(BIN)/jobrail migrate --app $(APP) --create-database

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

format: install-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The ops page's browser test drives Debian's Chromium through its ChromeDriver.
install-browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null; }

# The alert rules' tests (tests/unit/test_alert_rules.py) run Debian's promtool.
install-promtool:
	@command -v promtool >/dev/null || { \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }

# The PgBouncer tests (tests/support/pgbouncer.py) start Debian's pgbouncer on their own
# port. The package's own service (port 6432) is stopped and disabled: jobrail never uses it.
install-pgbouncer:
	@test -x /usr/sbin/pgbouncer || { \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq --no-install-recommends pgbouncer >/dev/null; \
		{ systemctl disable --now pgbouncer.service || service pgbouncer stop; } >/dev/null 2>&1 || true; }

# infra/prometheus/alerts.yml: valid, and firing as alerts.test.yml expects.
check-alerts: install-promtool
	cd infra/prometheus && promtool check rules alerts.yml && promtool test rules alerts.test.yml

# The documentation site (mkdocs.yml, docs/). Its reference pages are generated from the
# code at each build, so `make test` builds it too (docs-check, into a directory it then
# removes): a broken link or a page that no longer builds fails the tests.
# NO_MKDOCS_2_WARNING: Material's notice of its end of life, printed at every build.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs

docs: install-dev
	$(MKDOCS) build --strict --site-dir site

# Not --quiet: mkdocs 1.6 then lets warnings through even with --strict.
docs-check: install-dev
	@site=$$(mktemp -d) && trap 'rm -rf "$$site"' EXIT && \
	$(MKDOCS) build --strict --site-dir "$$site"

test: lint docs-check install-browser install-promtool install-pgbouncer
	$(BIN)/pytest --ignore=tests/faults

test-faults: install-dev
	$(BIN)/pytest tests/faults

# The same fault suite with fair dispatch on in every app and process it starts: the
# dispatcher must keep every promise the suite proves (CI runs it after test-faults).
test-faults-dispatch: install-dev
	TESTS_FAIR_DISPATCH=1 $(BIN)/pytest tests/faults

# A part of the integration suite that covers every database path, and the PgBouncer
# tests, through PgBouncer in transaction mode (tests/support/pgbouncer.py): CI runs it
# after test-faults-dispatch. Left out: the scheduler's minute.
PGBOUNCER_TESTS := $(addprefix tests/integration/test_,$(addsuffix .py,pgbouncer pipeline \
	tenants_cli outbox event_feed_stack webhooks_stack fair_dispatch scheduler))

test-pgbouncer: install-dev install-pgbouncer
	TESTS_PGBOUNCER=1 $(BIN)/pytest $(PGBOUNCER_TESTS) -k "not for_a_minute"

test-unit: install-dev install-promtool
	$(BIN)/pytest tests/unit

bench: install-bench
	$(BIN)/python -m bench.run

# requirements.lock: the versions every install here is held to (pip constraints), as
# installed and tested; `make lock` resolves pyproject's ranges afresh (the newest
# versions they allow, not the old lock's) and writes it again.
lock: | $(BIN)/python
	$(BIN)/pip install --quiet --upgrade -e '.[dev,bench]'
	{ echo "# Written by make lock: pip freeze of .venv with the dev and bench extras."; \
	  $(BIN)/pip freeze --exclude-editable | grep -v '^jobrail=='; } > requirements.lock

clean:
	rm -rf $(VENV) var site .pytest_cache .mypy_cache .ruff_cache
