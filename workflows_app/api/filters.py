"""The query filters of the lists (django-filter FilterSets).

A filter given a value that is not one of its field's values is a 400 ``invalid_parameters``
(the backend raises it), and so is a typed filter given an empty value (``?status=``): the
client asked for something, and silently ignoring it would answer another question.
"""

import datetime

import django_filters
from django import forms
from django.core.validators import ProhibitNullCharactersValidator
from drf_spectacular.utils import extend_schema_field

from workflows_app.models import Event, Execution, Schedule
from workflows_app.states import EventType, ExecutionStatus

#: What ``ordering`` takes (``-`` for descending); the default is ``-created_at``.
EXECUTION_ORDERING = ("created_at", "started_at", "ended_at", "status", "workflow_id")
DEFAULT_EXECUTION_ORDERING = ("-created_at",)
ORDERING_HELP = (f"comma-separated fields to sort by, '-' for descending: {', '.join(EXECUTION_ORDERING)}; "
                 "default -created_at")
MAX_BIGINT = 2**63 - 1


class StrictForm(forms.Form):
    """Refuses an empty value for a filter that has a type (an enum, a date, a number...)."""

    may_be_empty = ()

    def clean(self):
        cleaned = super().clean()
        for name in self.fields:
            if name not in self.may_be_empty and self.data.get(name, None) == "":
                self.add_error(name, "must not be empty.")
        return cleaned


class AnyTextField(forms.CharField):
    """Any text, NUL characters included (Django's CharField refuses them)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.validators = [v for v in self.validators if not isinstance(v, ProhibitNullCharactersValidator)]


class TextFilter(django_filters.CharFilter):
    """Equal to a text. A text with a NUL character matches nothing (nothing stored has one, and
    PostgreSQL cannot even compare it), rather than being refused: it is a string, as documented."""

    field_class = AnyTextField

    def filter(self, qs, value):
        if value and "\x00" in value:
            return qs.none()
        return super().filter(qs, value)


class ExecutionFilterForm(StrictForm):
    may_be_empty = ("workflow_id", "deployment_id", "concurrency_key")

    def clean(self):
        cleaned = super().clean()
        ordering = self.data.get("ordering")
        if ordering and "" in ordering.split(","):  # django-filter would skip the empty names
            self.add_error("ordering", "an empty field name (two commas in a row, or one at an end).")
        return cleaned


class UTCDateTimeField(django_filters.fields.IsoDateTimeField):
    """An ISO 8601 date and time, converted to UTC (a naive one is taken as UTC). One that
    falls outside the years 1 to 9999 once converted is refused rather than a database error."""

    def to_python(self, value):
        value = super().to_python(value)
        if value is None:
            return None
        try:
            return value.astimezone(datetime.timezone.utc)
        except OverflowError:
            raise forms.ValidationError("is out of range once converted to UTC.", code="invalid") from None


class UTCDateTimeFilter(django_filters.IsoDateTimeFilter):
    field_class = UTCDateTimeField


class ExecutionOrderingFilter(django_filters.OrderingFilter):
    """``ordering=field[,field...]``, ``-created_at`` when absent (django-filter calls every
    filter, given or not); ties are broken by id, so that pages never overlap."""

    def filter(self, qs, value):
        ordering = [self.get_ordering_value(p) for p in value or () if p] or list(DEFAULT_EXECUTION_ORDERING)
        return qs.order_by(*ordering, "id")


class ExecutionFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(choices=ExecutionStatus.choices, help_text="only executions in this status")
    workflow_id = TextFilter(help_text="only executions of this workflow")
    deployment_id = TextFilter(help_text="only executions of this deployment")
    concurrency_key = TextFilter(help_text="only executions that count against this concurrency key (as an "
                                           "execution's `concurrency_key` shows it)")
    parent = django_filters.UUIDFilter(help_text="only the children of this execution")
    rerun_of = django_filters.UUIDFilter(help_text="only the reruns of this execution")
    schedule = django_filters.UUIDFilter(help_text="only the executions this schedule started")
    created_after = UTCDateTimeFilter(field_name="created_at", lookup_expr="gte",
                                      help_text="only executions created at or after this time (ISO 8601)")
    created_before = UTCDateTimeFilter(field_name="created_at", lookup_expr="lt",
                                       help_text="only executions created before this time (ISO 8601)")
    ordering = ExecutionOrderingFilter(fields=EXECUTION_ORDERING, help_text=ORDERING_HELP)

    class Meta:
        model = Execution
        fields = ()
        form = ExecutionFilterForm


@extend_schema_field({"type": "integer", "format": "int64", "minimum": 0, "maximum": MAX_BIGINT,
                      "description": "only events with an id greater than this (the last id seen): for tailing"})
class EventCursorFilter(django_filters.Filter):
    """Events with an id greater than this one (the last id the client has seen)."""

    field_class = forms.IntegerField

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", MAX_BIGINT)
        super().__init__(*args, **kwargs)


class EventFilter(django_filters.FilterSet):
    execution_id = django_filters.UUIDFilter(help_text="only the events of this execution")
    after = EventCursorFilter(field_name="id", lookup_expr="gt")
    type = django_filters.ChoiceFilter(choices=EventType.choices, help_text="only events of this type")

    class Meta:
        model = Event
        fields = ()
        form = StrictForm


class TrueOrFalseField(forms.NullBooleanField):
    """``true`` or ``false``, as JSON writes them (Django's takes ``1``, ``yes``... and answers
    anything else as "not given", which would list everything)."""

    widget = forms.TextInput  # Django's select reads the query's text as a boolean first, garbage as None

    def to_python(self, value):
        if value in self.empty_values:
            return None
        if value in ("true", "false"):
            return value == "true"
        raise forms.ValidationError("must be true or false.", code="invalid")


class TrueOrFalseFilter(django_filters.BooleanFilter):
    field_class = TrueOrFalseField


class ScheduleFilterForm(StrictForm):
    may_be_empty = ("workflow_id",)


class ScheduleFilter(django_filters.FilterSet):
    workflow_id = TextFilter(help_text="only the schedules of this workflow")
    paused = TrueOrFalseFilter(help_text="true: only the paused schedules; false: only the others")

    class Meta:
        model = Schedule
        fields = ()
        form = ScheduleFilterForm
