"""Strict serializer fields: a JSON API takes the JSON type it documents, not something DRF could
coerce into it (``"10"`` for a number, ``1`` for a string or a boolean), and refuses what the
database cannot store (no input, however malformed, causes a 500): strings and JSON values go
through the one value check, ``workflows_app.values``.
"""

from django.core.validators import RegexValidator
from rest_framework import serializers

from workflows_app import values

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
        problem = values.string_problem(data)
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


class _CheckedJSONMixin:
    """The one value check (``workflows_app.values.check``) before DRF's own handling, which
    re-encodes a JSON value and could not with one nested deeper than the recursion limit.
    A refusal (``ValueRefused``) is answered by the exception handler: 400 ``invalid_parameters``,
    or 413 ``payload_too_large`` for a value over ``MAX_PAYLOAD_BYTES``."""

    def to_internal_value(self, data):
        values.check(data, self.field_name)
        return super().to_internal_value(data)


class JSONValueField(_CheckedJSONMixin, serializers.JSONField):
    """Any JSON value that can be stored."""


class JSONObjectField(_CheckedJSONMixin, serializers.DictField):
    """A JSON object (any values) that can be stored."""
