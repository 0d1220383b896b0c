"""A key's hint names it in listings and logs, and is never enough to use it."""

import pytest

from jobrail.tenants.domain import MAX_KEY_LENGTH, MIN_KEY_LENGTH, hint, new_api_key


@pytest.mark.parametrize(
    "key", ["demo-key", "abcdefghi", "jr_abcdefghij", "x" * 40, new_api_key(), "y" * 256]
)
def test_a_hint_shows_at_most_a_quarter_of_its_key(key: str) -> None:
    shown = hint(key).removesuffix("…")

    assert key.startswith(shown)
    assert len(shown) <= len(key) // 4
    assert hint(key) != key


def test_a_generated_key_is_still_known_by_its_prefix() -> None:
    key = new_api_key()

    assert hint(key) == key[:9] + "…"


def test_every_key_length_has_a_hint_shorter_than_the_key() -> None:
    for length in range(MIN_KEY_LENGTH, MAX_KEY_LENGTH + 1):
        key = "k" * length
        assert len(hint(key).removesuffix("…")) <= length // 4
