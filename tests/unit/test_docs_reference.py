"""The documentation site's reference pages are generated from the code (docs/gen): every
setting, every command and every route appears, including one added after this was
written. The site's build itself (`mkdocs build --strict`) runs in `make test`."""

import argparse
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from docs.gen import cli_reference, hooks, openapi_reference, pages, settings_reference, sources
from jobrail.settings import Settings

DOCS = Path(__file__).parents[2] / "docs"


def variable_names(model: type[BaseModel], prefix: str) -> list[str]:
    names = []
    for name, field in model.__pydantic_fields__.items():
        variable = prefix + (field.alias or name).upper()
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            names += variable_names(annotation, variable + "__")
        else:
            names.append(variable)
    return names


def row_of(page: str, variable: str) -> str:
    rows = [line for line in page.splitlines() if line.startswith(f"| `{variable}` |")]
    assert len(rows) == 1, f"{variable}: {len(rows)} rows"
    return rows[0]


def subcommands(parser: argparse.ArgumentParser, prog: str) -> list[str]:
    found = [prog]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += subcommands(sub, f"{prog} {name}")
    return found


def test_every_setting_has_a_row_with_its_variable() -> None:
    page = pages.settings_page()

    expected = variable_names(Settings, "JOBRAIL_")
    assert "JOBRAIL_DATABASE__URL" in expected
    assert "JOBRAIL_SCHEDULER__INBOX_KEEP_DAYS" in expected
    for variable in expected:
        row_of(page, variable)


def test_a_row_has_the_type_default_and_description() -> None:
    page = pages.settings_page()

    assert row_of(page, "JOBRAIL_JOBS__LEASE_S").split(" | ")[1:3] == ["float > 0", "`6.0`"]
    assert "renewed every third of it" in row_of(page, "JOBRAIL_JOBS__LEASE_S")
    # A setting named by its alias (`schema`), and one described by its docstring.
    assert "Postgres only" in row_of(page, "JOBRAIL_DATABASE__SCHEMA")
    assert "Unacknowledged deliveries" in row_of(page, "JOBRAIL_RABBIT__PREFETCH")
    assert "`25,100,250,1000" in row_of(page, "JOBRAIL_RABBIT__DELAY_TIERS_MS")


def test_the_reference_applications_settings_have_rows_too() -> None:
    page = pages.application_settings_page()

    for model in sources.APPLICATION_SETTINGS:
        for variable in variable_names(model, model.model_config["env_prefix"]):
            row_of(page, variable)
    assert "JOBRAIL_SYNC__PAGE_JOBS_FROM" in page


class Gauges(BaseModel):
    """Gauges of the engine."""

    needle: int = Field(default=3, ge=1, description="Where the needle points <at start>.")


class Grown(Settings):
    gauges: Gauges = Gauges()
    colour: str = "blue"


def test_a_field_and_a_section_added_later_appear() -> None:
    page = settings_reference.render_model(Grown, "JOBRAIL_")

    assert row_of(page, "JOBRAIL_GAUGES__NEEDLE") == (
        "| `JOBRAIL_GAUGES__NEEDLE` | int ≥ 1 | `3` | Where the needle points &lt;at start>. |"
    )
    assert row_of(page, "JOBRAIL_COLOUR").startswith("| `JOBRAIL_COLOUR` | str | `blue` |")
    assert "Gauges of the engine." in page


def test_every_command_and_tenants_action_has_its_help() -> None:
    parser = sources.cli_parser()
    page = cli_reference.render(parser)

    commands = subcommands(parser, "jobrail")
    assert {"jobrail run", "jobrail worker", "jobrail tenants revoke-key"} <= set(commands)
    for command in commands:
        assert f"`{command}`" in page
    # Each command's own help, its description and options, as `--help` prints it.
    assert "Revoke an API key by the key_id" in page
    assert "--create-database" in page


def test_a_command_added_later_appears() -> None:
    parser = sources.cli_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            added = action.add_parser("doctor", help="look the installation over")
            added.add_argument("--deep", help="look at everything")

    page = cli_reference.render(parser)

    assert "`jobrail doctor`" in page
    assert "look at everything" in page


def test_every_route_of_the_api_appears() -> None:
    document = sources.openapi_document()
    page = openapi_reference.render(document)

    operations = [
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if method in {"get", "post", "put", "patch", "delete"}
    ]
    assert ("POST", "/billing/invoices") in operations
    for method, path in operations:
        assert f"`{method} {path}`" in page


DOCUMENT: dict[str, Any] = {
    "paths": {
        "/gauges/{gauge_id}": {
            "put": {
                "summary": "Set a gauge",
                "description": "Set it.\n\n    - to any value",
                "parameters": [
                    {
                        "name": "gauge_id",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "format": "uuid"},
                    }
                ],
                "requestBody": {
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/G"}}}
                },
                "responses": {"200": {"description": "Set"}},
            }
        }
    },
    "components": {
        "schemas": {
            "G": {
                "type": "object",
                "properties": {"needle": {"type": "integer", "description": "Where it points"}},
                "required": ["needle"],
            }
        }
    },
}


def test_an_operation_has_its_parameters_body_and_responses() -> None:
    page = openapi_reference.render(DOCUMENT)

    assert "`PUT /gauges/{gauge_id}`" in page
    assert "Set it.\n\n- to any value" in page
    assert "| `gauge_id` | path | yes | string (uuid) |" in page
    assert "[G](#schema-g)" in page
    assert "| `200` | Set |" in page
    assert "| `needle` | integer | yes | Where it points |" in page


def test_every_marker_in_the_pages_has_a_generator() -> None:
    markers = {
        marker
        for page in DOCS.rglob("*.md")
        for marker in hooks.MARKER.findall(page.read_text(encoding="utf-8"))
    }

    assert markers == set(pages.GENERATED)
