"""The generated parts of the reference pages: what `sources` gives, rendered. Each page
of docs/reference/ holds a marker (``<!-- generated: NAME -->``) where its part goes."""

from collections.abc import Callable

from docs.gen import cli_reference, openapi_reference, settings_reference, sources


def settings_page() -> str:
    return settings_reference.render_model(
        sources.SETTINGS, sources.SETTINGS_PREFIX, title="General"
    )


def application_settings_page() -> str:
    return "\n".join(
        settings_reference.render_model(
            model, str(model.model_config.get("env_prefix", "")), level=3
        )
        for model in sources.APPLICATION_SETTINGS
    )


def http_api_page() -> str:
    return openapi_reference.render(sources.openapi_document())


def cli_page() -> str:
    return cli_reference.render(sources.cli_parser())


GENERATED: dict[str, Callable[[], str]] = {
    "<!-- generated: settings -->": settings_page,
    "<!-- generated: application-settings -->": application_settings_page,
    "<!-- generated: http-api -->": http_api_page,
    "<!-- generated: cli -->": cli_page,
}
