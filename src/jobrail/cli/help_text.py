"""The shape of a command's help (jobrail.cli.parser and jobrail.cli.operator_parser)."""

from typing import NamedTuple


class CommandHelp(NamedTuple):
    summary: str
    """Its line in the list of commands."""
    description: str
    """``jobrail COMMAND --help``: what it does, the settings it reads, an example."""
