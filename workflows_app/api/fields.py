"""Strict serializer fields: a JSON API takes the JSON type it documents, not something DRF could
coerce into it (``"10"`` for a number, ``1`` for a string or a boolean), and refuses what the
database cannot store (SPEC §8: no input, however malformed, causes a 500).

PostgreSQL refuses the NUL character in text and JSON (``\\u0000``), and no database takes a
lone surrogate (``\\ud800``: valid JSON, but not UTF-8), so strings anywhere in a value are
checked; JSON values are limited in depth, so that the response that shows them can always be
rendered.
"""

import math

from django.core.validators import RegexValidator
from rest_framework import serializers

#: Deepest nesting of objects and arrays accepted in a JSON value (parameters, an event payload).
MAX_JSON_DEPTH = 64


def string_problem(text):
    """Why the string ``text`` cannot be stored, or None."""
    if "\x00" in text:
        return "null characters (\\u0000) are not allowed"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "lone surrogates (\\ud800-\\udfff) are not allowed"
    return None


#: What the schema says of every string the API takes: no NUL character (the fields refuse it
#: before this validator would run; it is here for drf-spectacular, which documents it as ``pattern``).
NO_NUL = RegexValidator(r"^[^\x00]*$", message="null characters (\\u0000) are not allowed")


class StrictCharField(serializers.CharField):
    """A JSON string only (DRF's CharField also takes numbers) that can be stored."""

    default_error_messages = {"unstorable": "{problem}."}
    #: Whether the schema shows NO_NUL (a field documented as an enum does not need it).
    document_no_nul = True

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if self.document_no_nul:
            self.validators.append(NO_NUL)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        problem = string_problem(data)
        if problem:
            self.fail("unstorable", problem=problem)
        return super().to_internal_value(data)


class StrictChoiceField(serializers.ChoiceField):
    """One of the choices, given as a JSON string."""

    default_error_messages = {"invalid_type": "Not a valid string."}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid_type")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """``true`` or ``false`` only (DRF's BooleanField also takes ``"yes"``, ``1``, ``"on"``...)."""

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid", input=data)
        return data


class StrictFloatField(serializers.FloatField):
    """A JSON number only, finite (DRF's FloatField also takes numeric strings and booleans)."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            self.fail("invalid")
        return super().to_internal_value(data)


def json_value_problem(value):
    """Why ``value`` (parsed JSON) cannot be stored, or None. Iterative: no recursion limit."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                return f"nested deeper than {MAX_JSON_DEPTH} levels"
            if isinstance(item, dict):
                for key, child in item.items():
                    stack.append((key, depth + 1))
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, str) and string_problem(item):
            return string_problem(item)
        elif isinstance(item, float) and not math.isfinite(item):
            return "not a finite number"
    return None


class _CheckedJSONMixin:
    default_error_messages = {"unstorable": "{problem}."}

    def to_internal_value(self, data):
        data = super().to_internal_value(data)
        problem = json_value_problem(data)
        if problem:
            self.fail("unstorable", problem=problem)
        return data


class JSONValueField(_CheckedJSONMixin, serializers.JSONField):
    """Any JSON value that can be stored."""


class JSONObjectField(_CheckedJSONMixin, serializers.DictField):
    """A JSON object (any values) that can be stored."""
