"""Facts about JSON text that are cheaper to read off the text than to parse."""


def has_nul_escape(text: str) -> bool:
    """Whether JSON text (as ``json.dumps`` writes it, which escapes a NUL) holds a NUL.

    ``\\u0000`` is the escape of NUL unless its backslash is itself escaped
    (``"\\\\u0000"`` is a backslash and the text ``u0000``). Dropping every escaped
    backslash, left to right as JSON reads them, leaves ``\\u0000`` only where it is the
    escape. Postgres cannot store NUL in ``jsonb`` or ``text``.
    """
    return "\\u0000" in text and "\\u0000" in text.replace("\\\\", "")


def bytes_have_nul_escape(data: bytes) -> bool:
    """``has_nul_escape`` for UTF-8 JSON bytes (a message body)."""
    return b"\\u0000" in data and b"\\u0000" in data.replace(b"\\\\", b"")
