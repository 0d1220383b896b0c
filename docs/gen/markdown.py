"""Text from the code (docstrings, descriptions, help) made safe for a Markdown page.

What the code says may hold ``<token>`` or ``a | b``: outside code spans a ``<`` would
start an HTML tag and swallow the word, and in a table a ``|`` would end the cell.
"""

import re
import textwrap

_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)


def _outside_code(text: str, escape: dict[str, str]) -> str:
    parts = []
    position = 0
    for span in _CODE_SPAN.finditer(text):
        parts.append(_escape(text[position : span.start()], escape))
        parts.append(span.group(0))
        position = span.end()
    parts.append(_escape(text[position:], escape))
    return "".join(parts)


def _escape(text: str, escape: dict[str, str]) -> str:
    for character, replacement in escape.items():
        text = text.replace(character, replacement)
    return text


def paragraphs(text: str) -> str:
    """A docstring or description as Markdown paragraphs, ``<`` escaped outside code
    spans. Each paragraph loses its own indentation: a description may be a docstring
    with a sentence added after it, whose lines are indented differently, and Markdown
    would take an indented paragraph for code."""
    blocks = re.split(r"\n[ \t]*\n", text.strip("\n"))
    cleaned = [textwrap.dedent(block).strip("\n") for block in blocks]
    return _outside_code("\n\n".join(block for block in cleaned if block), {"<": "&lt;"})


def cell(text: str) -> str:
    """Text for one table cell: one line, ``<`` and ``|`` escaped outside code spans."""
    one_line = " ".join(text.split())
    return _outside_code(one_line, {"<": "&lt;", "|": "\\|"})


def code(text: str) -> str:
    """``text`` as a code span (a longer fence where it holds a backtick)."""
    fence = "``" if "`" in text else "`"
    padding = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{padding}{text}{padding}{fence}"


def heading(level: int, text: str, anchor: str) -> str:
    """A heading with an explicit id (the attr_list extension), so that links to it do
    not depend on how the title is turned into one."""
    return f"{'#' * level} {text} {{#{anchor}}}"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def slug(text: str) -> str:
    """An anchor from `text`: lower case, runs of anything but letters, digits and ``_``
    made one ``-``."""
    return re.sub(r"[^a-z0-9_]+", "-", text.lower()).strip("-")
