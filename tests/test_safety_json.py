"""offrl._safety.load_json: JSON from files and command lines."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offrl._safety import JSON_MAX_DEPTH, _json_depth, load_json

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='ab[]{}"\\ ', max_size=6),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(alphabet='k[{"\\', max_size=3), children, max_size=3),
    max_leaves=12,
)


def _naive_depth(value) -> int:
    if isinstance(value, list):
        return 1 + max((_naive_depth(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((_naive_depth(v) for v in value.values()), default=0)
    return 0


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_depth_scan_matches_the_structure(value):
    text = json.dumps(value)
    assert _json_depth(text) == _naive_depth(value)
    assert load_json(text, "x") == value


def test_deep_nesting_is_a_value_error_naming_the_source():
    text = "[" * 50_000 + "]" * 50_000
    with pytest.raises(ValueError, match=r"manifest\.json: JSON nested 50000 levels deep; at most 64"):
        load_json(text, "manifest.json")
    assert load_json("[" * JSON_MAX_DEPTH + "]" * JSON_MAX_DEPTH, "x") is not None


def test_bad_text_names_the_source():
    with pytest.raises(ValueError, match=r"f: not UTF-8 text \(byte 1\)"):
        load_json(b"[\xff]", "f")
    with pytest.raises(ValueError, match=r"f: not valid JSON"):
        load_json("{", "f")
    with pytest.raises(TypeError, match="expected JSON text, got int"):
        load_json(3, "f")


def test_a_huge_integer_is_a_value_error_naming_the_source():
    with pytest.raises(ValueError, match=r"^f\.json: not valid JSON \(Exceeds the limit"):
        load_json("[" + "9" * 5000 + "]", "f.json")
