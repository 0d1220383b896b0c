"""The HTTP API reference, rendered from the app's OpenAPI document: each operation,
grouped by its tag, with its summary, description, parameters, request body and
responses, then each schema's properties. An operation added to the code is on the page
at the next build."""

from collections.abc import Iterator
from typing import Any

from docs.gen.markdown import cell, code, heading, paragraphs, slug, table

METHODS = ("get", "put", "post", "patch", "delete", "head", "options")
_REF = "#/components/schemas/"


def render(document: dict[str, Any]) -> str:
    parts = []
    for tag, operations in _by_tag(document).items():
        parts.append(heading(2, tag.capitalize(), "tag-" + slug(tag)))
        for method, path, operation in operations:
            parts += _operation(method, path, operation)
    schemas = document.get("components", {}).get("schemas", {})
    if schemas:
        parts.append(heading(2, "Schemas", "schemas"))
        for name, schema in sorted(schemas.items()):
            parts += _schema(name, schema)
    return "\n\n".join(parts) + "\n"


def operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(method, path, operation)`` in the document's order."""
    for path, item in document.get("paths", {}).items():
        for method, operation in item.items():
            if method in METHODS:
                yield method, path, operation


def _by_tag(document: dict[str, Any]) -> dict[str, list[tuple[str, str, dict[str, Any]]]]:
    grouped: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for method, path, operation in operations(document):
        tag = (operation.get("tags") or ["other"])[0]
        grouped.setdefault(tag, []).append((method, path, operation))
    return grouped


def _operation(method: str, path: str, operation: dict[str, Any]) -> list[str]:
    title = f"{method.upper()} {path}"
    parts = [heading(3, code(title), slug(title))]
    if operation.get("summary"):
        parts.append(f"**{cell(operation['summary'])}**")
    if operation.get("description"):
        parts.append(paragraphs(operation["description"]))
    parameters = operation.get("parameters", [])
    if parameters:
        parts.append(
            table(
                ["parameter", "in", "required", "type", "description"],
                [
                    [
                        code(parameter["name"]),
                        parameter["in"],
                        "yes" if parameter.get("required") else "no",
                        cell(schema_type(parameter.get("schema", {}))),
                        cell(parameter.get("description") or _described(parameter)),
                    ]
                    for parameter in parameters
                ],
            )
        )
    body = operation.get("requestBody")
    if body:
        kinds = ", ".join(
            f"{code(kind)}: {schema_type(media.get('schema', {}))}"
            for kind, media in body.get("content", {}).items()
        )
        required = "" if body.get("required") else " (optional)"
        parts.append(f"Request body{required}: {kinds}")
    responses = operation.get("responses", {})
    if responses:
        parts.append(
            table(
                ["status", "description", "body"],
                [
                    [code(status), cell(response.get("description", "")), _bodies(response)]
                    for status, response in sorted(responses.items())
                ],
            )
        )
    return parts


def _described(parameter: dict[str, Any]) -> str:
    return str(parameter.get("schema", {}).get("description", ""))


def _bodies(response: dict[str, Any]) -> str:
    return cell(
        ", ".join(
            f"{code(kind)}: {schema_type(media.get('schema', {}))}"
            if media.get("schema")
            else code(kind)
            for kind, media in response.get("content", {}).items()
        )
    )


def _schema(name: str, schema: dict[str, Any]) -> list[str]:
    parts = [heading(3, name, schema_anchor(name))]
    if schema.get("description"):
        parts.append(paragraphs(schema["description"]))
    properties = schema.get("properties", {})
    required = set(schema.get("required", []))
    if properties:
        parts.append(
            table(
                ["field", "type", "required", "description"],
                [
                    [
                        code(field),
                        cell(schema_type(value)),
                        "yes" if field in required else "no",
                        cell(value.get("description", "")),
                    ]
                    for field, value in properties.items()
                ],
            )
        )
    elif "enum" in schema or "type" in schema:
        parts.append(schema_type(schema))
    return parts


def schema_anchor(name: str) -> str:
    return "schema-" + slug(name)


def schema_type(schema: dict[str, Any]) -> str:
    """A JSON schema in a few words: ``string (uuid)``, a link to a named schema,
    ``array of ...``, ``one of `a`, `b```, ``X or null``."""
    if "$ref" in schema:
        name = schema["$ref"].removeprefix(_REF)
        return f"[{name}](#{schema_anchor(name)})"
    for combined in ("anyOf", "oneOf", "allOf"):
        if combined in schema:
            return " or ".join(schema_type(option) for option in schema[combined])
    if "enum" in schema:
        return "one of " + ", ".join(code(str(value)) for value in schema["enum"])
    if "const" in schema:
        return code(str(schema["const"]))
    kind = schema.get("type", "any")
    if kind == "array":
        return "array of " + schema_type(schema.get("items", {}))
    if isinstance(kind, list):
        kind = " or ".join(kind)
    return f"{kind} ({schema['format']})" if "format" in schema else str(kind)
