"""RSC-GEN-8's measure made cheap without changing an answer (issue 13).

* :func:`cortex_spec.validation._text_size`, the measure of a long string,
  gives to the byte what the JSON encoder gives, on every text: one pass
  finds whether anything is escaped, and text with escapes is counted kind
  by kind.
* The size tests' payloads (``conformance/helpers.payload_of_bytes``) cut
  from the longest one built are the payloads built afresh: the same text,
  exactly ``n`` UTF-8 bytes, the same wide characters.
"""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from cortex_spec import validation
from cortex_spec.conformance import helpers


def _encoded(text: str) -> int:
    """The contract's words: the compact JSON string, encoded."""
    return len(json.dumps(text, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))


#: Every character the encoder treats apart, and some it does not.
_CHARS = st.sampled_from(['"', "\\", "\b", "\t", "\n", "\f", "\r", "\x00", "\x01", "\x1f", "\x7f", "/",
                          "\ud800", "\udfff", "é", "\U0001F600", "\u2028", "x", " "])
_TEXT = st.one_of(st.text(max_size=40), st.lists(_CHARS, max_size=40).map("".join),
                  st.tuples(st.lists(_CHARS, max_size=5).map("".join), st.integers(0, 5000)).map(
                      lambda t: t[0] + "x" * t[1]))


@settings(max_examples=500, deadline=None)
@given(text=_TEXT)
def test_text_size_is_the_encoded_size(text: str) -> None:
    assert validation._text_size(text) == _encoded(text), repr(text[:80])


def test_text_size_of_text_without_escapes_is_its_bytes_and_quotes() -> None:
    for text in ("", "x" * 5000, "é\U0001F600" * 3000, "\u2028/\x7f"):
        assert validation._text_size(text) == len(text.encode("utf-8")) + 2 == _encoded(text)


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(0, 60_000), min_size=1, max_size=6))
def test_cut_payloads_are_the_built_ones(sizes: list[int]) -> None:
    helpers._longest.clear()
    for n in sizes:
        text = helpers.payload_of_bytes(n)
        assert text == helpers._build(n), n
        assert len(text.encode("utf-8")) == n


def test_an_8_mib_payload_is_cut_from_a_longer_one() -> None:
    helpers._longest.clear()
    limit = validation.MAX_ENTITY_BYTES
    over = helpers.payload_of_bytes(limit + 1)
    at = helpers.payload_of_bytes(limit)
    assert at == over[:-1] and len(at.encode("utf-8")) == limit and at == helpers._build(limit)
    assert "\U0001F600" in at and "\u00e9" in at  # code points and UTF-16 units undercount it
    helpers._longest.clear()
