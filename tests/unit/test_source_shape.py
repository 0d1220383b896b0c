"""The shape the platform's source keeps: no module over 400 lines, and no private name of
Taskiq, taskiq-aio-pika, aio-pika or aiormq used anywhere but the one adapter that says
why (``jobrail.transport.internals``)."""

import ast
from pathlib import Path

import jobrail

SOURCE = Path(jobrail.__file__).parent
MAX_LINES = 400
WRAPPED = ("taskiq", "taskiq_aio_pika", "aio_pika", "aiormq")
ADAPTER = SOURCE / "transport" / "internals.py"


def _modules() -> list[Path]:
    return sorted(path for path in SOURCE.rglob("*.py") if "__pycache__" not in path.parts)


def _private_reaches(tree: ast.AST) -> list[str]:
    """Private names imported from, or read off, the wrapped libraries' modules."""
    aliases: dict[str, str] = {}  # local name -> the wrapped module it stands for
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            root = node.module.split(".")[0]
            if root not in WRAPPED:
                continue
            for alias in node.names:
                if alias.name.startswith("_"):
                    found.append(f"from {node.module} import {alias.name}")
                else:
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            if any(part.startswith("_") for part in node.module.split(".")):
                found.append(f"from {node.module} import ...")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in WRAPPED:
                    aliases[(alias.asname or alias.name).split(".")[0]] = alias.name
                    if any(part.startswith("_") for part in alias.name.split(".")):
                        found.append(f"import {alias.name}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            found.append(f"{node.value.id}.{node.attr}")
    return found


def test_the_source_is_where_this_test_looks() -> None:
    modules = _modules()
    assert len(modules) > 100
    assert ADAPTER in modules


def test_no_module_is_over_400_lines() -> None:
    long = {
        str(path.relative_to(SOURCE)): n
        for path in _modules()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_only_the_adapter_reaches_past_the_libraries_public_apis() -> None:
    reaches = {
        str(path.relative_to(SOURCE)): found
        for path in _modules()
        if path != ADAPTER and (found := _private_reaches(ast.parse(path.read_text())))
    }
    assert reaches == {}


def test_the_check_finds_a_private_reach() -> None:
    # The adapter itself does reach past them: the check sees it there.
    assert _private_reaches(ast.parse(ADAPTER.read_text()))
    sample = "from taskiq.receiver.receiver import _PrefetchedMessage\nimport aiormq\naiormq._x\n"
    assert _private_reaches(ast.parse(sample)) == [
        "from taskiq.receiver.receiver import _PrefetchedMessage",
        "aiormq._x",
    ]
