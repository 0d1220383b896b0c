"""How JSON documents (job payloads and results, context columns) are written.

- UTF-8, not ASCII escapes: ``json.dumps``' default wrote each emoji as a 12-byte
  ``\\ud83d\\ude00`` pair, so a 40 KB body of emoji was stored as 120 KB (SQLite keeps
  the text as written; Postgres gets it over the wire). Compact separators too.
- No NUL: Postgres cannot hold U+0000 in ``jsonb`` (or ``text``). The API refuses a NUL
  at the edge (``jobrail.http.nul_guard``); a document that still has one (made by code,
  not sent by a client) is refused here with a clear error, in both modes alike, before
  any statement runs, instead of a driver error halfway through a transaction.
"""

import json
from typing import Any

from jobrail.kernel.errors import InvalidInputError
from jobrail.kernel.json_text import has_nul_escape

NUL_ERROR = "a JSON document holds a NUL character (U+0000), which cannot be stored"

# One encoder for every call: ``json.dumps`` with options makes a new one each time.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(value: Any) -> str:
    text = _ENCODER.encode(value)
    if has_nul_escape(text):
        raise InvalidInputError(NUL_ERROR)
    return text
