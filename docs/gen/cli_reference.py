"""The command-line reference: what ``--help`` prints for the command, each of its
subcommands and each of theirs, walked from the argparse parser, so that a command
added to the code is on the page at the next build."""

import argparse
import functools
from collections.abc import Callable, Iterator

from docs.gen.markdown import code, heading, slug

WIDTH = 88
"""The help's line width on the page, whatever the terminal that builds the site."""


def commands(
    parser: argparse.ArgumentParser, name: str | None = None
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``("jobrail", parser)``, then each subcommand's full name and parser, depth first
    in the order ``--help`` lists them."""
    name = name or parser.prog
    yield name, parser
    for action in parser._actions:  # argparse keeps its subcommands nowhere public
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from commands(sub, f"{name} {sub_name}")


def help_text(parser: argparse.ArgumentParser) -> str:
    """``parser.format_help()`` at `WIDTH` columns (the parser is changed to that width)."""
    if not isinstance(parser.formatter_class, functools.partial):
        # Every HelpFormatter takes a width; typeshed's protocol for the class names prog only.
        made: Callable[..., argparse.HelpFormatter] = parser.formatter_class
        parser.formatter_class = functools.partial(made, width=WIDTH)
    return parser.format_help().rstrip()


def render(parser: argparse.ArgumentParser) -> str:
    parts = []
    for name, command in commands(parser):
        depth = name.count(" ")
        parts.append(heading(2 if depth < 2 else 3, code(name), slug(name)))
        parts.append(f"```text\n{help_text(command)}\n```")
    return "\n\n".join(parts) + "\n"
