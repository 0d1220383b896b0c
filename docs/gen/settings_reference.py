"""The settings reference: one row per environment variable, walked from a settings
model's fields (pydantic's ``model_fields``), so that a field added to the code is on the
page at the next build.

A field whose type is a model is a section: its fields are ``<PREFIX><FIELD>__<NAME>``,
as pydantic-settings reads them with ``__`` between levels. A model inside a list or a
dict is the shape of a JSON value, described once after the tables.
"""

import ast
import inspect
import itertools
import json
import textwrap
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, Union

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import NoDecode

from docs.gen.markdown import cell, code, heading, paragraphs, slug, table

NESTED_DELIMITER = "__"
# Bounds this high only keep a value from overflowing where it is used (a timedelta, a
# Postgres integer column); what a reader needs are the others.
_OVERFLOW_GUARD = 10**9
_SIGNS = (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤"))


@dataclass(frozen=True)
class Variable:
    name: str
    type: str
    default: str
    description: str


def render_model(
    model: type[BaseModel], prefix: str, *, title: str | None = None, level: int = 2
) -> str:
    """`model`'s variables: its own fields under `title` (the variable pattern if none),
    one heading and table per section, then the shapes of its JSON values."""
    parts = list(_tables(model, prefix, title, level))
    found = shapes(model)
    if found:
        parts.append(heading(level, "JSON values", f"{anchor(prefix)}-json-values"))
        for shape in found:
            parts.append(heading(level + 1, shape.__name__, shape_anchor(shape)))
            parts.append(_described(shape, _table("field", fields(shape, lambda name: name))))
    return "\n\n".join(parts) + "\n"


def _tables(model: type[BaseModel], prefix: str, title: str | None, level: int) -> Iterator[str]:
    own = variables(model, prefix)
    if own:
        yield heading(level, title or code(prefix + "*"), anchor(prefix))
        yield _described(model, _table("variable", own))
    for name, section in _sections(model):
        yield from _tables(section, prefix + name + NESTED_DELIMITER, None, level)


def variables(model: type[BaseModel], prefix: str) -> list[Variable]:
    """The variables of `model`'s own fields (not its sections'), in declaration order."""
    return fields(model, lambda name: prefix + name.upper())


def fields(model: type[BaseModel], named: Callable[[str], str]) -> list[Variable]:
    docs = attribute_docstrings(model)
    return [
        Variable(
            name=named(field.alias or name),
            type=type_name(field.annotation, field.metadata),
            default=default_of(field),
            description=field.description or docs.get(name, ""),
        )
        for name, field in model.model_fields.items()
        if not _is_model(field.annotation)
    ]


def _sections(model: type[BaseModel]) -> Iterator[tuple[str, type[BaseModel]]]:
    for name, field in model.model_fields.items():
        if _is_model(field.annotation):
            yield (field.alias or name).upper(), field.annotation  # type: ignore[misc]


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def attribute_docstrings(model: type[BaseModel]) -> dict[str, str]:
    """The string literal under each field of `model` and of its bases (``x: int = 1``
    then ``\"\"\"...\"\"\"``), which pydantic keeps only when a model asks it to."""
    found: dict[str, str] = {}
    for klass in reversed(model.__mro__):
        # Only the classes that declare some of its fields: not pydantic's own, whose
        # sources are long to parse.
        if not set(inspect.get_annotations(klass)) & set(model.model_fields):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):  # built in, or made where there is no source
            continue
        tree = ast.parse(source)
        if not tree.body or not isinstance(tree.body[0], ast.ClassDef):
            continue
        body = tree.body[0].body
        for statement, following in itertools.pairwise(body):
            if (
                isinstance(statement, ast.AnnAssign)
                and isinstance(statement.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                found[statement.target.id] = inspect.cleandoc(following.value.value)
    return found


def type_name(annotation: Any, metadata: list[Any] | None = None) -> str:
    """The type as a reader writes the value: ``int ≥ 1``, ``one of `a`, `b```, ``list
    of str (comma-separated or JSON)``."""
    metadata = metadata or []
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(arguments[0], [*arguments[1:], *metadata])
    if origin in (Union, types.UnionType):
        named = [type_name(argument) for argument in arguments if argument is not type(None)]
        optional = ", optional" if type(None) in arguments else ""
        return " or ".join(named) + _bounds(metadata) + optional
    if origin is Literal:
        return "one of " + ", ".join(code(str(argument)) for argument in arguments)
    if origin is list:
        comma = any(item is NoDecode or isinstance(item, NoDecode) for item in metadata)
        return f"list of {type_name(arguments[0])} ({'comma-separated or ' if comma else ''}JSON)"
    if origin is dict:
        return f"JSON object of {type_name(arguments[0])} to {type_name(arguments[1])}"
    if annotation is SecretStr:
        return "str (secret)" + _bounds(metadata)
    if _is_model(annotation):
        return f"[{annotation.__name__}](#{shape_anchor(annotation)})"
    return str(getattr(annotation, "__name__", annotation)) + _bounds(metadata)


def _bounds(metadata: list[Any]) -> str:
    words = []
    for item in metadata:
        if isinstance(item, FieldInfo):  # Annotated[int, Field(gt=0)] inside a list
            return _bounds(item.metadata)
        for attribute, sign in _SIGNS:
            value = getattr(item, attribute, None)
            if isinstance(value, int | float) and not (sign in "<≤" and value >= _OVERFLOW_GUARD):
                words.append(f"{sign} {value:g}" if isinstance(value, float) else f"{sign} {value}")
        if getattr(item, "min_length", None):
            words.append(f"at least {item.min_length} long")
        if isinstance(getattr(item, "pattern", None), str):
            words.append(f"matching {code(item.pattern)}")
    return (" " + ", ".join(words)) if words else ""


def default_of(field: FieldInfo) -> str:
    """The default as it is written in the environment."""
    if field.default is PydanticUndefined and field.default_factory is None:
        return "required"
    return _shown(field.get_default(call_default_factory=True, validated_data={}))


def _shown(value: object) -> str:
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return code(str(value).lower())
    if value in ("", [], {}):
        return "empty"
    if isinstance(value, list) and not any(isinstance(item, BaseModel) for item in value):
        return code(",".join(str(item) for item in value))
    if isinstance(value, list | dict | BaseModel):
        return code(json.dumps(_plain(value)))
    return code(str(value))


def _plain(value: object) -> object:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def shapes(model: type[BaseModel]) -> list[type[BaseModel]]:
    """The models that are JSON values (in a list or a dict) of `model` or its sections."""
    found: list[type[BaseModel]] = []
    for field in model.model_fields.values():
        inner = [field.annotation] if _is_model(field.annotation) else []
        for candidate in [*_inner_types(field.annotation), *inner]:
            if not _is_model(candidate):
                continue
            more = shapes(candidate) if candidate in inner else [candidate, *shapes(candidate)]
            found += [shape for shape in more if shape not in found]
    return found


def _inner_types(annotation: Any) -> Iterator[Any]:
    for argument in typing.get_args(annotation):
        yield argument
        yield from _inner_types(argument)


def anchor(prefix: str) -> str:
    """``jobrail-api-limits`` for ``JOBRAIL_API_LIMITS__``."""
    return slug(prefix.replace("_", " "))


def shape_anchor(model: type[BaseModel]) -> str:
    return "shape-" + slug(model.__name__)


def _described(model: type[BaseModel], text: str) -> str:
    doc = model.__dict__.get("__doc__")
    return f"{paragraphs(doc)}\n\n{text}" if doc else text


def _table(first: str, found: list[Variable]) -> str:
    return table(
        [first, "type", "default", "description"],
        [
            [code(item.name), cell(item.type), item.default, cell(item.description)]
            for item in found
        ],
    )
