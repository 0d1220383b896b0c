"""The body scan that finds a NUL in JSON text without parsing it."""

import json

import pytest

from jobrail.http.nul_guard import json_has_nul


@pytest.mark.parametrize(
    "document",
    [
        {"m": "a\u0000b"},
        {"m": "\\\u0000"},
        {"m": "\\\\\u0000"},
        {"a": ["x", {"b": "\u0000"}]},
        {"\u0000": 1},
    ],
)
def test_a_nul_is_found_whatever_precedes_it(document: object) -> None:
    assert json_has_nul(json.dumps(document).encode())
    assert json_has_nul(json.dumps(document, ensure_ascii=False).encode())


@pytest.mark.parametrize(
    "document",
    [
        {"m": "\\u0000"},
        {"m": "\\\\u0000"},
        {"m": "\\"},
        {"m": "u0000 \\u00000"},
        {"m": "\u0001\u00a0😀"},
    ],
)
def test_text_that_only_looks_like_the_escape_is_not_a_nul(document: object) -> None:
    text = json.dumps(document)
    assert "\u0000" not in json.loads(text)["m"]
    assert not json_has_nul(text.encode())


def test_a_raw_nul_byte_is_found() -> None:
    assert json_has_nul(b'{"m": "a\x00"}')


def test_every_split_of_the_backslashes_agrees_with_a_parse() -> None:
    for backslashes in range(6):
        text = '{"m": "' + "\\" * backslashes + 'u0000"}'
        try:
            parsed = json.loads(text)
        except ValueError:
            continue
        assert json_has_nul(text.encode()) == ("\u0000" in parsed["m"]), text


def test_a_job_message_holding_a_nul_is_malformed() -> None:
    from jobrail.kernel.ids import new_id
    from jobrail.transport.codec import MalformedMessageError
    from tests.support.wire import job_envelope, parse_job_message

    good = job_envelope(
        job_id=new_id(), job_type="demo.echo", queue="jobs.default", tenant_id="acme"
    ).body
    parse_job_message(good)
    for field in ("tenant_id", "task_id"):
        data = json.loads(good)
        if field == "tenant_id":
            data["labels"]["tenant_id"] = "ac\u0000me"
        else:
            data["task_id"] = "id\u0000"
        with pytest.raises(MalformedMessageError, match="NUL"):
            parse_job_message(json.dumps(data).encode())
    data = json.loads(good)
    data["labels"]["tenant_id"] = "ac\\u0000me"  # the text \u0000, not a NUL
    parse_job_message(json.dumps(data).encode())
