import pytest
from pydantic import BaseModel

from jobrail.jobs.registry import JobRegistry, JobSpec, job
from jobrail.settings import OutboxSettings, SettingsError, load_settings


class P(BaseModel):
    x: int


async def handler(payload: P, ctx: object) -> None:
    return None


def test_a_bad_setting_is_reported_by_its_variable_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBRAIL_DATABASE__POOL_SIZE", "lots")
    monkeypatch.setenv("JOBRAIL_RABBIT__URL", "http://rabbit")

    with pytest.raises(SettingsError) as caught:
        load_settings()

    message = str(caught.value)
    assert "JOBRAIL_DATABASE__POOL_SIZE" in message
    assert "JOBRAIL_RABBIT__URL: Value error, use an amqp:// or amqps:// URL" in message


def test_an_unsupported_database_driver_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBRAIL_DATABASE__URL", "postgresql://u:secret@db/x")

    with pytest.raises(SettingsError, match="JOBRAIL_DATABASE__URL") as caught:
        load_settings()
    assert "secret" not in str(caught.value)


@pytest.mark.parametrize(
    ("variable", "url"),
    [
        ("JOBRAIL_DATABASE__URL", "postgresql+asyncpg://u:p%2F%40ss@[::1]:5432/db"),
        ("JOBRAIL_DATABASE__URL", "postgresql+asyncpg://u@db.internal/db?ssl=require"),
        # SQLAlchemy takes a password up to its last '@': these work unencoded.
        ("JOBRAIL_DATABASE__URL", "postgresql+asyncpg://u:pa/ss@db:5432/jobrail"),
        ("JOBRAIL_DATABASE__URL", "postgresql+asyncpg://u:p#s?s[x]@db/jobrail"),
        ("JOBRAIL_DATABASE__URL", "postgresql+asyncpg:///db?host=/var/run/postgresql"),
        ("JOBRAIL_DATABASE__URL", "sqlite+aiosqlite:///./var/jobrail.db"),
        ("JOBRAIL_RABBIT__URL", "amqps://u:p@rabbit.internal/vhost"),
        ("JOBRAIL_REDIS__URL", "redis://:secret@127.0.0.1:6380/2"),
        ("JOBRAIL_REDIS__URL", "unix:///run/redis.sock?db=1"),
    ],
)
def test_urls_a_driver_takes_are_accepted(
    monkeypatch: pytest.MonkeyPatch, variable: str, url: str
) -> None:
    monkeypatch.setenv(variable, url)

    settings = load_settings()

    section = variable.removeprefix("JOBRAIL_").split("__")[0].lower()
    assert getattr(settings, section).url.get_secret_value() == url


def test_lists_can_be_given_as_comma_separated_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBRAIL_WORKER__QUEUES", "jobs.high, jobs.io")
    monkeypatch.setenv("JOBRAIL_RABBIT__DELAY_TIERS_MS", "5000,100")

    settings = load_settings()

    assert settings.worker.queues == ["jobs.high", "jobs.io"]
    assert settings.rabbit.delay_tiers_ms == [100, 5000]


def test_a_worker_cannot_consume_a_queue_that_is_not_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOBRAIL_WORKER__QUEUES", "jobs.nope")

    with pytest.raises(SettingsError, match=r"jobs\.nope"):
        load_settings()


def test_secrets_do_not_show_in_the_settings_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBRAIL_DATABASE__URL", "postgresql+asyncpg://u:hunter2@db/x")
    assert "hunter2" not in repr(load_settings())


def test_a_job_type_on_an_unknown_queue_is_refused_at_start_up() -> None:
    spec = job("t.x", payload=P, queue="jobs.nope")(handler)
    with pytest.raises(ValueError, match=r"queue 'jobs\.nope'"):
        JobRegistry([spec], queues=["jobs.default"], default_timeout_s=1)


def test_job_type_names_are_dotted_lower_case() -> None:
    with pytest.raises(ValueError, match="dotted"):
        JobSpec(name="Echo", handler=handler, payload=P)


def test_a_job_type_is_declared_once() -> None:
    spec = job("t.x", payload=P)(handler)
    with pytest.raises(ValueError, match="declared twice"):
        JobRegistry([spec, spec], queues=["jobs.default"], default_timeout_s=1)


def test_timeouts_come_from_the_type_unless_settings_override_them() -> None:
    quick = job("t.quick", payload=P, timeout_s=5)(handler)
    plain = job("t.plain", payload=P)(handler)
    registry = JobRegistry(
        [quick, plain], queues=["jobs.default"], default_timeout_s=60, timeouts_s={"t.plain": 9}
    )

    assert registry.timeout("t.quick").total_seconds() == 5
    assert registry.timeout("t.plain").total_seconds() == 9


def test_timeouts_for_unknown_job_types_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown job types"):
        JobRegistry([], queues=["jobs.default"], default_timeout_s=1, timeouts_s={"t.zzz": 1})


def test_a_published_rows_mark_waits_well_below_the_age_at_which_the_relay_takes_it() -> None:
    assert OutboxSettings().mark_delay_s == 0.25  # relay_min_age_s 2 s by default
    assert OutboxSettings(relay_min_age_s=0.4).mark_delay_s == pytest.approx(0.1)
    assert OutboxSettings(relay_min_age_s=0).mark_delay_s == 0


def test_production_loads_the_demo_module_only_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The demo's routes let any tenant queue hour-long sleeping jobs: a sandbox's, not a
    # production deployment's, unless it names the module itself.
    monkeypatch.delenv("JOBRAIL_MODULES", raising=False)
    assert load_settings().modules == ["demo"]  # development: the demo is there
    monkeypatch.setenv("JOBRAIL_MODE", "stack")
    monkeypatch.setenv("JOBRAIL_ENVIRONMENT", "production")
    assert load_settings().modules == []
    monkeypatch.setenv("JOBRAIL_MODULES", "demo")
    assert load_settings().modules == ["demo"]


@pytest.mark.parametrize("payload", ["a string", ["x", 1], 7, None])
def test_a_payload_that_is_no_object_fails_validation_as_any_misfit_does(payload: object) -> None:
    # A row written past the API: a permanent failure saying why, not a ValueError from
    # dict() that the runner retried as an unexpected error.
    from jobrail.jobs.registry import parse_payload
    from jobrail.kernel.errors import InvalidInputError

    spec = job("unit.payload", payload=P, queue="jobs.default")(handler)

    with pytest.raises(InvalidInputError, match=r"payload does not fit job type 'unit\.payload'"):
        parse_payload(spec, payload)  # type: ignore[arg-type]


def test_a_refused_url_is_not_repeated_in_the_error_of_settings_built_in_code() -> None:
    # A host app may build its settings itself: pydantic's error would show the input.
    from pydantic import ValidationError

    from jobrail.settings import DatabaseSettings, RedisSettings, Settings

    for build in (
        lambda: Settings(database={"url": "postgresql+asyncpg://u:hunter2@db:99999/x"}),
        lambda: DatabaseSettings(url="postgresql+asyncpg://u:hunter2@db:99999/x"),
        lambda: RedisSettings(url="redis://:hunter2@127.0.0.1:99999/0"),
    ):
        with pytest.raises(ValidationError) as refused:
            build()
        assert "hunter2" not in str(refused.value)
        assert "port" in str(refused.value)


@pytest.mark.parametrize(
    ("env", "refused"),
    [
        ({}, True),  # the embedded mode on its SQLite file: the key is seeded
        ({"JOBRAIL_MODE": "stack"}, False),  # never seeded: a leftover value is ignored
        ({"JOBRAIL_DATABASE__URL": "postgresql+asyncpg://u@db/x"}, False),
    ],
)
def test_the_demo_key_is_checked_only_where_it_is_seeded(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], refused: bool
) -> None:
    monkeypatch.setenv("JOBRAIL_DEMO_API_KEY", "demo")  # shorter than a key may be
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    if refused:
        with pytest.raises(SettingsError, match="JOBRAIL_DEMO_API_KEY"):
            load_settings()
    else:
        assert load_settings().demo_api_key.get_secret_value() == "demo"


def test_the_demo_echo_job_times_out_only_after_its_longest_sleep() -> None:
    # At 30 s, an echo sleeping a minute (its payload allows an hour) timed out on every
    # attempt: a demo job that could never succeed.
    from annotated_types import Le

    from jobrail.demo.jobs import EchoPayload, echo

    [longest_ms] = [
        m.le for m in EchoPayload.model_fields["sleep_ms"].metadata if isinstance(m, Le)
    ]

    assert echo.timeout_s is not None
    assert echo.timeout_s * 1000 > longest_ms


def test_a_job_type_with_a_sync_handler_or_a_payload_that_is_no_model_is_refused() -> None:
    # Both were accepted, and failed only when a job ran (after its attempts).
    def sync_handler(payload: P, ctx: object) -> None:
        return None

    with pytest.raises(ValueError, match="its handler must be an async function"):
        job("t.sync", payload=P)(sync_handler)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="payload must be a pydantic model class"):
        job("t.dict", payload=dict)(handler)  # type: ignore[arg-type]

    class AsyncCallable:
        async def __call__(self, payload: P, ctx: object) -> None:
            return None

    assert job("t.callable", payload=P)(AsyncCallable()).name == "t.callable"


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        # Each was taken, then overflowed where it was used: a 500 on every enqueue or
        # sign-in, a traceback at every prune or scheduler tick.
        ("JOBRAIL_RETRY__MAX_ATTEMPTS", "99999999999999999999999", "less than or equal"),
        ("JOBRAIL_OPS__SESSION_TTL_S", "inf", "finite number"),
        ("JOBRAIL_OPS__SESSION_TTL_S", "1e300", "less than or equal"),
        ("JOBRAIL_SCHEDULER__PRUNE_AFTER_DAYS", "99999999999", "less than or equal"),
        ("JOBRAIL_SCHEDULER__CATCH_UP_S", "1e12", "less than or equal"),
        ("JOBRAIL_EVENTS__KEEP_DAYS", "nan", "finite number"),
        # Renewed every quarter of it: at a millisecond the lead was lost every second.
        ("JOBRAIL_SCHEDULER__LEADER_TTL_S", "0.001", "greater than or equal to 1"),
        # A misspelt key was ignored and the schedule kept its cron.
        (
            "JOBRAIL_SCHEDULER__SCHEDULES",
            '{"prune-jobs": {"crom": "0 4 * * *"}}',
            "Extra inputs are not permitted",
        ),
    ],
)
def test_a_value_that_would_overflow_or_is_misspelt_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, says: str
) -> None:
    monkeypatch.setenv(variable, value)

    with pytest.raises(SettingsError) as refused:
        load_settings()

    assert says in str(refused.value)
    assert variable.split("__")[0] in str(refused.value)


def test_a_json_value_that_does_not_parse_names_its_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # pydantic-settings names the section ("api_limits"), not the variable.
    monkeypatch.setenv("JOBRAIL_API_LIMITS__ENQUEUE", '{"window_s": 60,')

    with pytest.raises(SettingsError) as refused:
        load_settings()

    assert str(refused.value).splitlines() == [
        "invalid settings:",
        "  JOBRAIL_API_LIMITS__ENQUEUE: is not valid JSON "
        "(Expecting property name enclosed in double quotes: line 1 column 17 (char 16))",
    ]
