"""Reading the ops page's tables the way a person does: by their column headers."""

from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class Cell:
    header: bool
    text: str = ""
    links: list[str] = field(default_factory=list)


class _Tables(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[Cell]]] = {}
        self._table: list[list[Cell]] | None = None
        self._cell: Cell | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "table":
            self._table = self.tables.setdefault(found.get("id") or "", [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table:
            self._cell = Cell(header=tag == "th")
            self._table[-1].append(self._cell)
        elif tag == "a" and self._cell is not None:
            self._cell.links.append(found.get("href") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None
        elif tag in ("td", "th"):
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.text += data


def _tables(page: str) -> dict[str, list[list[Cell]]]:
    parser = _Tables()
    parser.feed(page)
    return parser.tables


def rows(page: str, table_id: str) -> list[dict[str, Cell]]:
    """The rows of a table under its header row, each cell by its column's header."""
    head, *body = _tables(page)[table_id]
    names = [cell.text.strip() for cell in head]
    return [dict(zip(names, row, strict=True)) for row in body]


def texts(page: str, table_id: str) -> list[dict[str, str]]:
    return [{name: cell.text.strip() for name, cell in row.items()} for row in rows(page, table_id)]


def fields(page: str, table_id: str) -> dict[str, Cell]:
    """A table of names (th) and values (td), one pair a row."""
    return {name.text.strip(): value for name, value in _tables(page)[table_id]}


def has_table(page: str, table_id: str) -> bool:
    return table_id in _tables(page)
