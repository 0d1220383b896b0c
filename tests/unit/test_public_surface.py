"""jobrail's public surface: the top-level names and the few public modules.

A module (the reference application in contexts/, or one outside the repository)
uses these only; the import-linter contract "The reference application uses the
public surface only" holds contexts/ to them.
"""

import importlib
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

import jobrail

PUBLIC_MODULES = ["jobrail.kernel", "jobrail.ports", "jobrail.web", "jobrail.sql"]
WITH_ALL = ["jobrail", "jobrail.ports", "jobrail.web", "jobrail.sql"]
PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"
CONTRACT = "The reference application uses the public surface only"


def fresh_interpreter(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return done.stdout.strip()


@pytest.mark.parametrize("name", ["jobrail", *PUBLIC_MODULES])
def test_each_public_module_says_it_is_public(name: str) -> None:
    doc = importlib.import_module(name).__doc__ or ""

    assert "Public:" in doc


@pytest.mark.parametrize("name", WITH_ALL)
def test_every_name_a_public_module_lists_resolves(name: str) -> None:
    module = importlib.import_module(name)

    assert len(set(module.__all__)) == len(module.__all__)
    missing = [n for n in module.__all__ if getattr(module, n, None) is None]
    assert missing == []


@pytest.mark.parametrize("name", ["jobrail.ports", "jobrail.web", "jobrail.sql"])
def test_the_public_modules_reexport_the_implementations(name: str) -> None:
    module = importlib.import_module(name)

    for exported in module.__all__:
        value = getattr(module, exported)
        home = getattr(value, "__module__", None)
        if isinstance(value, ModuleType) or home is None or not home.startswith("jobrail."):
            continue
        if home == name:
            pytest.fail(f"{name}.{exported} is defined there: a public module only re-exports")


def test_the_top_level_names_resolve_lazily_to_their_implementations() -> None:
    for name, home in jobrail._EXPORTS.items():
        assert name in jobrail.__all__
        assert getattr(jobrail, name) is getattr(importlib.import_module(home), name)


def test_an_unknown_top_level_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = jobrail.no_such_name  # type: ignore[attr-defined]


def test_importing_jobrail_imports_no_framework_until_a_name_is_used() -> None:
    loaded = fresh_interpreter(
        "import sys, jobrail\n"
        "heavy = ('fastapi', 'sqlalchemy', 'pydantic', 'taskiq', 'dishka', 'jobrail.facade',"
        " 'jobrail.modules', 'jobrail.settings')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "jobrail.Module\n"
        "print('jobrail.modules' in sys.modules)"
    )

    assert loaded.splitlines() == ["[]", "True"]


def test_the_ports_are_plain_python() -> None:
    loaded = fresh_interpreter(
        "import sys, jobrail.ports\n"
        "frameworks = ('fastapi', 'starlette', 'sqlalchemy', 'pydantic', 'taskiq', 'dishka',"
        " 'redis', 'aio_pika')\n"
        "print(sorted(m for m in frameworks if m in sys.modules))"
    )

    assert loaded == "[]"


def test_the_contract_allows_the_public_modules_and_forbids_every_other_subpackage() -> None:
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    (contract,) = [c for c in contracts if c["name"] == CONTRACT]

    assert contract["forbidden_modules"] == ["jobrail.*"]
    allowed = {rule.split(" -> ")[1].removesuffix(".**") for rule in contract["ignore_imports"]}
    assert allowed == set(PUBLIC_MODULES)
