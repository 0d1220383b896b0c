"""The import-linter contracts of the reference contexts name them by wildcard, so that a
context added to ``contexts/`` is held to them without an edit (README, "Add a context").
A contract that lists contexts by name would leave a new one unchecked."""

import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
CONTEXTS = {path.name for path in (PYPROJECT.parent / "contexts").iterdir() if path.is_dir()}


def _context_contracts() -> list[dict[str, object]]:
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    return [c for c in contracts if "context" in c["name"].lower()]


def _module_expressions(contract: dict[str, object]) -> list[str]:
    names: list[str] = []
    for field in ("containers", "modules", "source_modules", "forbidden_modules"):
        value = contract.get(field, [])
        assert isinstance(value, list)
        names.extend(value)
    return names


def test_the_reference_contexts_are_there_to_check() -> None:
    assert {"billing", "sync", "notifications"} <= CONTEXTS


def test_no_context_contract_names_a_context() -> None:
    contracts = _context_contracts()
    assert len(contracts) >= 4
    for contract in contracts:
        for expression in _module_expressions(contract):
            parts = expression.split(".")
            named = parts[1] if parts[0] == "contexts" and len(parts) > 1 else None
            assert named in (None, "*", "shared"), (contract["name"], expression)


def test_every_context_is_layered_independent_and_its_domain_and_use_cases_guarded() -> None:
    by_type: dict[str, list[str]] = {}
    for contract in _context_contracts():
        by_type.setdefault(str(contract["type"]), []).extend(_module_expressions(contract))

    assert "contexts.*" in by_type["layers"]
    assert "contexts.*" in by_type["independence"]
    assert {"contexts.*.domain", "contexts.*.application"} <= set(by_type["forbidden"])
