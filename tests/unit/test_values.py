"""The one value check (``workflows_app.values``), property by property: what it takes comes back
unchanged and survives a JSON round trip; a single bad part anywhere — a NUL, a lone surrogate,
NaN or an infinity, nesting past 64, a value that is not JSON — is refused naming where it is;
the size limit is exact; cleaned text is always storable; strict parsing refuses what Python's
json takes and JSON does not."""

import json

import pytest
from django.test import override_settings
from hypothesis import given, settings
from hypothesis import strategies as st

from workflows_app import values
from workflows_app.errors import ParameterError, ValueRefused

#: Text that can be stored: any code point but NUL and the surrogates.
good_text = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=20)
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | good_text
good_values = st.recursive(scalars, lambda children: st.lists(children, max_size=4)
                           | st.dictionaries(good_text, children, max_size=4), max_leaves=30)
#: Any text at all, lone surrogates and NUL included.
any_text = st.lists(st.integers(0, 0x10FFFF), max_size=30).map(lambda points: "".join(map(chr, points)))
bad_parts = st.sampled_from(["a\x00b", "\ud800", "x\udcff", float("nan"), float("inf"), float("-inf"), {1, 2},
                             b"bytes", object()])


def nested(depth, leaf=0):
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def put_inside(value, part, path):
    """``value`` with ``part`` placed at the container reached by ``path`` (a list of choices)."""
    if isinstance(value, list) and value and path:
        index = path[0] % len(value)
        return value[:index] + [put_inside(value[index], part, path[1:])] + value[index + 1:]
    if isinstance(value, dict) and value and path:
        key = sorted(value)[path[0] % len(value)]
        return {**value, key: put_inside(value[key], part, path[1:])}
    return [value, part] if not isinstance(value, dict) else {**value, "bad": part}


@settings(max_examples=300, deadline=None)
@given(good_values)
def test_a_storable_value_comes_back_unchanged_and_survives_a_json_round_trip(value):
    assert values.check(value, "v") is value
    assert json.loads(json.dumps(value, allow_nan=False)) == value
    assert values.json_size(value) == len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


@settings(max_examples=300, deadline=None)
@given(good_values, bad_parts, st.lists(st.integers(0, 10), max_size=6))
def test_one_bad_part_anywhere_is_refused_naming_the_place(value, part, path):
    with pytest.raises(ValueRefused) as refused:
        values.check(put_inside(value, part, path), "parameters")
    assert refused.value.place.startswith("parameters")
    assert not refused.value.too_large
    assert isinstance(refused.value, ParameterError), "every door that refuses parameters refuses it"
    assert values.string_problem(str(refused.value)) is None, "the refusal itself can be shown anywhere"


@pytest.mark.parametrize("part, says", [
    ("a\x00b", "null characters"), ("\ud800", "lone surrogates"), (float("nan"), "NaN"),
    (float("inf"), "infinities"), ({1}, "set is not a JSON value"),
])
def test_the_reason_says_what_is_wrong_and_where(part, says):
    with pytest.raises(ValueRefused, match=says) as refused:
        values.check({"servers": [{"name": "ok"}, {"name": part}]}, "parameters")
    assert refused.value.place == "parameters.servers[1].name"


def test_a_key_that_cannot_be_stored_is_refused_too():
    with pytest.raises(ValueRefused, match="a key: lone surrogates"):
        values.check({"\udcff": 1}, "payload")


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 64))
def test_nesting_is_taken_up_to_64_levels(depth):
    assert values.check(nested(depth), "v") == nested(depth)


@settings(max_examples=50, deadline=None)
@given(st.integers(65, 5000))
def test_nesting_past_64_levels_is_refused_however_deep(depth):
    with pytest.raises(ValueRefused, match="nested deeper than 64 levels"):
        values.check(nested(depth), "payload")


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 4000))
def test_the_size_limit_is_exact_and_configurable(length):
    value = {"blob": "é" * length}  # two bytes each in UTF-8, as stored
    size = values.json_size(value)
    with override_settings(WORKFLOWS={"MAX_PAYLOAD_BYTES": 4096}):
        if size <= 4096:
            assert values.check(value, "payload") is value
        else:
            with pytest.raises(ValueRefused) as refused:
                values.check(value, "payload")
            assert refused.value.too_large and f"{size} bytes" in str(refused.value)


def test_the_default_limit_is_2_mib():
    values.check("x" * (2 * 1024 * 1024 - 2), "v")  # with its quotes: exactly 2 MiB
    with pytest.raises(ValueRefused, match="2097152 allowed"):
        values.check("x" * (2 * 1024 * 1024 - 1), "v")


@settings(max_examples=300, deadline=None)
@given(any_text)
def test_cleaned_text_can_always_be_stored_and_keeps_what_could(text):
    cleaned = values.clean_text(text)
    assert values.string_problem(cleaned) is None
    if values.string_problem(text) is None:
        assert cleaned == text


def test_long_text_is_cut_saying_how_much():
    assert values.clean_text("x" * 100, limit=10) == "x" * 10 + "... [cut: 90 more characters]"


def test_an_error_is_cleaned_field_by_field():
    error = values.clean_error({"type": "OSError", "message": "bad \udcff", "traceback": "\x00", "cause": None})
    assert error == {"type": "OSError", "message": "bad \\udcff", "traceback": "\\x00", "cause": None}


@pytest.mark.parametrize("text, says", [
    ('{"a": NaN}', "NaN is not valid JSON"), ("[Infinity]", "Infinity is not valid JSON"),
    ("1e400", "number out of range"), ("[" * 100000 + "]" * 100000, "nested deeper than 64 levels"),
    ("{", "Expecting property name"),
])
def test_strict_parsing_refuses_what_json_does_not_allow(text, says):
    with pytest.raises(ValueError, match=says):
        values.loads(text)


@settings(max_examples=200, deadline=None)
@given(good_values)
def test_strict_parsing_reads_back_what_was_written(value):
    assert values.loads(json.dumps(value)) == value
