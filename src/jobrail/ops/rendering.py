"""The console's pages from Jinja2 templates (``ops/templates``), autoescaped: every value
from the database, the broker or a request is escaped unless a template says otherwise,
and none does for such a value. A page asked for by htmx (its ``HX-Request`` header) is
answered with its ``live`` block alone, the part that refreshes itself."""

import json
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from jobrail.ops.page_parts import REFRESH_S, amount, ops_path, progress_text, when

HTMX_VERSION = "2.0.11"
"""The htmx shipped in ``ops/static/htmx.min.js`` (npm ``htmx.org``, Zero-Clause BSD)."""


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


_ENV = Environment(
    loader=PackageLoader("jobrail.ops", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=False,
)
_ENV.filters.update(when=when, amount=amount, progress=progress_text, pretty_json=pretty_json)
_ENV.globals.update(ops_path=ops_path, refresh_s=REFRESH_S, htmx_version=HTMX_VERSION)
# The macros every page uses, as `p` (a global, so that a block rendered alone has them).
_ENV.globals["p"] = _ENV.get_template("_parts.html").module


def render(name: str, *, live_only: bool = False, **context: Any) -> str:
    """The template `name` with `context`; its ``live`` block alone if `live_only`."""
    template = _ENV.get_template(name)
    if live_only and "live" in template.blocks:
        return "".join(template.blocks["live"](template.new_context(context)))
    return template.render(context)
