"""What the API takes and answers.

Output serializers are read-only views of the models; the execution's token (``token_hash``)
is never one of their fields. Input serializers are strict: each field takes its JSON type
only, and a key that is not a field is refused (a misspelt ``"dry-run": true`` must not start
a real run).

Timestamps are ISO 8601 in UTC and big integers are numbers, whatever the project's
``TIME_ZONE`` and ``REST_FRAMEWORK`` (``DATETIME_FORMAT``, ``COERCE_BIGINT_TO_STRING``) say:
DRF's fields read those from the project's settings as they serialize, so the
model serializers of the API (``APIModelSerializer``, the agents app's too) use fields of
their own.
"""

import copy
import datetime
import functools
from collections.abc import Mapping
from types import MappingProxyType

import django_filters
from django.db import models
from drf_spectacular.utils import extend_schema_field
from rest_framework import ISO_8601, serializers

from workflows_app.api.fields import (
    JSONObjectField,
    JSONValueField,
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictFloatField,
)
from workflows_app import queries
from workflows_app.api.filters import ExecutionFilter
from workflows_app.bulk import selection as bulk_selection
from workflows_app.models import Event, Execution, Operation
from workflows_app.states import FailureMode, OperationState, StepKind, WarningCode

#: The actions of ``POST /executions/{id}``.
ACTIONS = ("cancel", "force-cancel", "kill", "resume", "force-resume", "pause", "unpause")
#: Longest timeout or wait_after_fail accepted, in seconds (about 31 years): the engine adds
#: them to dates, which end in the year 9999.
MAX_SECONDS = 10**9


class ErrorSerializer(serializers.Serializer):
    """Every error response."""

    error_code = serializers.CharField(help_text="what went wrong, e.g. invalid_parameters, not_found")
    message = serializers.CharField(help_text="a readable one-line explanation")


# --- output ----------------------------------------------------------------------------------

class UTCDateTimeField(serializers.DateTimeField):
    """A timestamp as ISO 8601 in UTC (``2030-01-01T12:00:00Z``)."""

    format = ISO_8601
    timezone = datetime.timezone.utc


class BigIntegerField(serializers.BigIntegerField):
    """A big integer (an event's id) as a JSON number."""

    coerce_to_string = False


class APIModelSerializer(serializers.ModelSerializer):
    """DRF's ModelSerializer, with the API's timestamps and big integers."""

    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.DateTimeField: UTCDateTimeField,
        models.BigAutoField: BigIntegerField,
        models.BigIntegerField: BigIntegerField,
    }


class ExecutionSerializer(APIModelSerializer):
    """An execution; never its token."""

    parameters = serializers.DictField(read_only=True, help_text="the workflow's parameters")
    payload = serializers.DictField(read_only=True, help_text="the durable workflow data, {} at start")

    class Meta:
        model = Execution
        fields = ("id", "workflow_id", "deployment_id", "parameters", "status", "failure_mode", "timeout",
                  "wait_after_fail", "payload", "error", "is_dry_run", "created_by", "created_at", "started_at",
                  "ended_at", "parent", "parent_step", "rerun_of", "rerun_from", "schedule", "scheduled_for", "concurrency_key",
                  "run_after", "priority")
        extra_kwargs = {"parent": {"help_text": "the execution that started this one as a child, or null"},
                        "parent_step": {"help_text": "the step of the parent that follows this child; '' for none"},
                        "rerun_of": {"help_text": "the execution this one runs again from a step, or null"},
                        "rerun_from": {"help_text": "the step of rerun_of this one runs again from; '' for none"},
                        "schedule": {"help_text": "the schedule that started this one, or null (also once that "
                                                  "schedule is deleted)"},
                        "scheduled_for": {"help_text": "the slot of its schedule it runs for, or null"},
                        "concurrency_key": {"help_text": "the key of its workflow's concurrency limit it counts "
                                                         "against, e.g. provision:customer=\"acme\"; '' for none"},
                        "run_after": {"help_text": "a deferred start: it stays pending until this time, or null"},
                        "priority": {"help_text": "-100 to 100: its operations go ahead of lower ones waiting in "
                                                  "their agents' queues; 0 by default"}}
        read_only_fields = fields


#: What an execution's own page shows and a list leaves out: each may be
#: as large as ``WORKFLOWS["MAX_PAYLOAD_BYTES"]``, and a page of 100 would be 100 times that.
LIST_OMITS = ("parameters", "payload")


class ExecutionListItemSerializer(ExecutionSerializer):
    """An execution as ``GET /executions`` lists it: without its parameters and payload, which
    ``GET /executions/{id}`` shows."""

    # None removes a field the base declares (DRF's serializers, like Django's forms).
    parameters = None
    payload = None

    class Meta(ExecutionSerializer.Meta):
        fields = tuple(name for name in ExecutionSerializer.Meta.fields if name not in LIST_OMITS)
        read_only_fields = fields


OperationsSummarySerializer = type("OperationsSummarySerializer", (serializers.Serializer,), {
    "__doc__": "How many operations of the execution are in each state; every state, zeros included.",
    **{state.value: serializers.IntegerField(read_only=True, min_value=0) for state in OperationState},
})


class WarningSerializer(serializers.Serializer):
    """Something an operator should know of an execution that its status does not say."""

    code = serializers.ChoiceField(choices=WarningCode.choices, help_text=(
        "unknown_agent: steps were sent to an agent that has never been seen, or that has been offline for "
        "longer than WORKFLOWS['AGENT_OFFLINE_AFTER_SECONDS']; they wait until an agent of that name comes. "
        "rate_limited / concurrency_limited: steps wait for their operation's rate limit or for a free slot of its "
        "concurrency, one warning per key (named in the message); they are sent as soon as the limit allows"))
    step = serializers.CharField(help_text="the step it is about (of several waiting for one agent or one limit's key, "
                                           "the first by name)")
    message = serializers.CharField(help_text="a readable one-line explanation")


class ExecutionDetailSerializer(ExecutionSerializer):
    """An execution with the count of its operations per state (``operations_summary``) and what
    an operator should know of it (``warnings``)."""

    operations_summary = OperationsSummarySerializer(read_only=True)
    warnings = WarningSerializer(many=True, read_only=True, help_text=(
        "what an operator should know that the status does not say, e.g. steps waiting for an agent that "
        "never came (unknown_agent); [] when nothing"))

    class Meta(ExecutionSerializer.Meta):
        fields = (*ExecutionSerializer.Meta.fields, "operations_summary", "warnings")
        read_only_fields = fields


def execution_detail(execution, operations_summary=None) -> dict:
    """The execution as ``GET /executions/{id}`` and every action answer it (to a user who may view
    it: ``workflows_app.api.permissions.withhold_document``), with its count per
    state and its warnings: what the API and the commands' ``--json`` print. ``operations_summary``:
    the counts when the caller knows them (:data:`NO_OPERATIONS` for an execution it has just
    created), else they are counted (one query). The warnings are looked for (two queries) only
    when the counts have steps sent and not started: no other step waits for an agent."""
    if operations_summary is None:
        operations_summary = queries.operations_summary(execution.pk)
    execution.operations_summary = operations_summary
    sent = operations_summary[OperationState.SENDING] or operations_summary[OperationState.SENT]
    execution.warnings = queries.warnings(execution.pk) if sent else []
    return _detail_serializer().to_representation(execution)


#: The ``operations_summary`` of an execution that has no operations yet: every state, zero.
NO_OPERATIONS = MappingProxyType(dict.fromkeys(OperationState.values, 0))


@functools.cache
def _detail_serializer():
    """The one ``ExecutionDetailSerializer`` of :func:`execution_detail`, fields built. DRF builds
    a serializer's fields for each instance, a model serializer's from the model: that cost as
    much as the rest of an answer. The fields keep nothing of what they show (no instance, no
    data), so one serializer shows every execution."""
    serializer = ExecutionDetailSerializer()
    serializer.fields["operations_summary"].fields  # builds both levels now, not later in two threads at once
    serializer.fields["warnings"].child.fields
    return serializer


class OperationSerializer(APIModelSerializer):
    """An operation: one step of an execution."""

    depends_on = serializers.SlugRelatedField(many=True, read_only=True, slug_field="name",
                                              help_text="the names of the steps it waits for")

    class Meta:
        model = Operation
        fields = ("id", "execution", "name", "operation", "args", "kwargs", "agent", "local", "state", "result",
                  "error", "attempt", "current_retries", "max_retries", "retry_interval", "next_attempt_at", "timeout",
                  "depends_on", "pending_at", "sending_at", "sent_at", "started_at", "rescheduled_at",
                  "succeeded_at", "failed_at", "cancelled_at")
        read_only_fields = fields


class GraphNodeSerializer(serializers.Serializer):
    """An operation, as a node of the graph; a child execution's step is a node of kind
    ``workflow``, with the child's id."""

    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=StepKind.choices)
    operation = serializers.CharField(help_text="the registered operation, or the child's workflow")
    agent = serializers.CharField(allow_blank=True)
    local = serializers.BooleanField(help_text="a local step: it runs inside the manager's pass over its "
                                               "execution, with no agent and no message (false for a workflow node)")
    state = serializers.ChoiceField(choices=OperationState.choices)
    child = serializers.UUIDField(allow_null=True, help_text="a workflow node's child execution (null for an "
                                                             "operation, and until the child is started)")


class GraphSerializer(serializers.Serializer):
    """The execution's operations, their dependencies (``edges``: ``[from, to]`` means ``to``
    waits for ``from``) and the order of the code (``order``: ``to`` was asked for after
    ``from`` was awaited)."""

    nodes = GraphNodeSerializer(many=True)
    edges = serializers.ListField(child=serializers.ListField(child=serializers.CharField(), min_length=2,
                                                              max_length=2),
                                  help_text="[from, to]: the step `to` depends on the step `from`")
    order = serializers.ListField(child=serializers.ListField(child=serializers.CharField(), min_length=2,
                                                              max_length=2),
                                  help_text="[from, to]: the workflow code asked for the step `to` after it had "
                                            "awaited the step `from` (the order of imperative code; `to` does not "
                                            "wait for `from`)")


class EventSerializer(APIModelSerializer):
    """One entry of an execution's log."""

    execution_id = serializers.UUIDField(read_only=True)
    data = serializers.JSONField(read_only=True)

    class Meta:
        model = Event
        fields = ("id", "execution_id", "operation", "type", "message", "data", "timestamp")
        read_only_fields = fields


class WorkflowParameterSerializer(serializers.Serializer):
    """A parameter of a workflow (its function's signature)."""

    name = serializers.CharField()
    required = serializers.BooleanField()
    default = serializers.JSONField(allow_null=True, help_text="null when required")


class OperationLimitsSerializer(serializers.Serializer):
    """The limits of a registered operation, kept by the managers when they send its steps."""

    operation = serializers.CharField()
    rate_limit = serializers.CharField(allow_null=True, help_text="at most this many attempts sent in any window of "
                                       "the period (`10/s`, `600/m`, `1000/h`); null: no rate limit")
    rate_key = serializers.CharField(allow_null=True, help_text="what the rate counts per: `agent` or a parameter of "
                                     "the operation; null: the operation as a whole")
    concurrency = serializers.IntegerField(allow_null=True, min_value=1, help_text="at most this many attempts sent "
                                           "or started at once; null: no limit")
    concurrency_key = serializers.CharField(allow_null=True, help_text="what the concurrency counts per: `agent` or a "
                                            "parameter of the operation; null: the operation as a whole")


class WorkflowSerializer(serializers.Serializer):
    """A registered workflow."""

    name = serializers.CharField()
    parameters = WorkflowParameterSerializer(many=True)
    schema = serializers.DictField(help_text=(
        "the JSON Schema (draft 2020-12) of the start's `parameters` object, from the annotations of the "
        "workflow function: `properties` (each parameter's type; `{}` for any JSON value), `required`, defaults; "
        "a start whose parameters do not fit it is refused with `invalid_parameters`"))
    failure_mode = serializers.ChoiceField(choices=FailureMode.choices,
                                           help_text="what an execution gets when it asks for none")
    timeout = serializers.FloatField(allow_null=True, help_text="seconds; null: no limit")
    concurrency = serializers.IntegerField(allow_null=True, min_value=1, help_text=(
        "at most this many of its executions active at once per concurrency_key value; the others wait `queued` "
        "and start in order; null: no limit"))
    concurrency_key = serializers.CharField(allow_null=True, help_text=(
        "what the limit counts per: one of its parameters, or `deployment`; null: the workflow as a whole"))
    operation_limits = OperationLimitsSerializer(many=True, help_text=(
        "the rate and concurrency limits of the registered operations that have one, by name: any workflow may "
        "call any operation, so every workflow lists them all; a step over a limit waits `pending` with a warning"))
    paused = serializers.BooleanField(help_text=(
        "paused as a whole (`POST workflows/{id}`): its new executions wait `queued`, its schedules' slots are skipped"))


# --- input -----------------------------------------------------------------------------------

class StrictSerializer(serializers.Serializer):
    """Refuses a key that is none of its fields, with the errors of the fields it has."""

    def get_fields(self):
        """The declared fields, each copied for this serializer as DRF's are, but shallowly: DRF
        builds each field again from its arguments (``copy.deepcopy``), which cost more than the
        validation itself on every request. A copy is bound to this serializer alone; what it
        shares with the declared field (validators, choices, messages, a child field) is set when
        the class is made and never changed after. A nested serializer keeps state of its own
        while it validates, so it is copied in full."""
        return {name: copy.deepcopy(field) if isinstance(field, serializers.BaseSerializer) else copy.copy(field)
                for name, field in self._declared_fields.items()}

    def to_internal_value(self, data):
        errors = {}
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if not isinstance(data, Mapping):
                raise
            errors = dict(exc.detail)
        errors.update({key: ["This field is not accepted."] for key in data if key not in self.fields})
        if errors:
            raise serializers.ValidationError(errors)
        return value


class WorkflowIdField(StrictCharField):
    """A workflow's name: any string (one naming no workflow is answered ``unknown_workflow`` by the
    view); the schema lists the names registered (``workflows_app.api.schema``)."""

    document_no_nul = False


class StartExecutionSerializer(StrictSerializer):
    """What starts an execution: the workflow and its parameters, and optionally the rest; or,
    with ``rerun_of`` and ``from_step``, an execution run again from one of its steps (the
    workflow is the original's; parameters and options default to the original's)."""

    workflow_id = WorkflowIdField(required=False, allow_blank=True, trim_whitespace=False,
                                  help_text="a registered workflow (required, but with rerun_of: then the original's)")
    rerun_of = serializers.UUIDField(required=False, allow_null=True,
                                     help_text="run this execution again from its step from_step: its other steps "
                                               "that succeeded keep their results and do not run again")
    from_step = StrictCharField(required=False, max_length=255, trim_whitespace=False,
                                help_text="with rerun_of: the step run again, with every step that followed from it")
    parameters = JSONObjectField(required=False, allow_null=True,
                                 help_text="the workflow's parameters; each required one must be given")
    deployment_id = StrictCharField(required=False, allow_null=True, max_length=200, trim_whitespace=False,
                                    help_text="one active execution per deployment, unless queue or force")
    failure_mode = StrictChoiceField(choices=FailureMode.choices, required=False, allow_null=True,
                                     help_text="default: the workflow's, else WORKFLOWS['FAILURE_MODE']")
    timeout = StrictFloatField(required=False, allow_null=True, min_value=0, max_value=MAX_SECONDS,
                               help_text="seconds; default: the workflow's")
    wait_after_fail = StrictFloatField(required=False, allow_null=True, min_value=0, max_value=MAX_SECONDS,
                                       help_text="seconds; default: WORKFLOWS['WAIT_AFTER_FAIL']")
    dry_run = StrictBooleanField(required=False, default=False,
                                 help_text="record every operation and event, call no operation function")
    queue = StrictBooleanField(required=False, default=False,
                               help_text="if the deployment has an active execution, wait for it (queued)")
    force = StrictBooleanField(required=False, default=False,
                               help_text="if the deployment has an active execution, run beside it")
    idempotency_key = StrictCharField(required=False, allow_null=True, max_length=255, trim_whitespace=False,
                                      help_text="as the header Idempotency-Key (give one or the other, or both the "
                                                "same): the same key with the same request answers the execution "
                                                "its first start started, 200")

    def validate(self, attrs):
        if attrs.get("rerun_of") is None:
            errors = {"from_step": ["Only with rerun_of."]} if "from_step" in attrs else {}
            if "workflow_id" not in attrs:
                errors["workflow_id"] = [self.fields["workflow_id"].error_messages["required"]]
            if errors:
                raise serializers.ValidationError(errors)
        elif "from_step" not in attrs:
            raise serializers.ValidationError({"from_step": ["This field is required with rerun_of."]})
        return attrs


@extend_schema_field({"type": "string", "enum": list(ACTIONS)})
class ActionField(StrictCharField):
    """A string; one that is none of ACTIONS is answered ``unknown_action`` by the view."""

    document_no_nul = False


class ActionSerializer(StrictSerializer):
    """An action on an execution."""

    action = ActionField(allow_blank=True, trim_whitespace=False)


class ExternalEventSerializer(StrictSerializer):
    """An external event for an execution's workflow."""

    name = StrictCharField(max_length=255, trim_whitespace=False, help_text="what the workflow waits for")
    payload = JSONValueField(required=False, allow_null=True, help_text="any JSON value; default null")


# --- bulk actions (workflows_app.bulk) -------------------------------------------------------

@extend_schema_field({"type": "string", "format": "uuid"})
class _IdText(StrictCharField):
    """A filter's text that must be an id (the list's ``UUIDFilter`` checks it)."""


@extend_schema_field({"type": "string", "format": "date-time"})
class _TimeText(StrictCharField):
    """A filter's text that must be a time (the list's ``IsoDateTimeFilter`` checks it)."""


#: The field of a filter's text, by the filter's kind: its format as ``GET /executions`` documents it.
_FILTER_TEXTS = ((django_filters.UUIDFilter, _IdText), (django_filters.IsoDateTimeFilter, _TimeText))


def _bulk_filter_field(name):
    """A filter of ``GET /executions`` as a key of a bulk action's ``filter``: its text, as the query
    takes it (the list's FilterSet checks the value: ``workflows_app.bulk.selection``), with the
    format the query's schema gives it (an id, a time)."""
    definition = ExecutionFilter.base_filters[name]
    help_text = definition.extra.get("help_text", "")
    if definition.extra.get("choices"):
        return StrictChoiceField(choices=definition.extra["choices"], required=False, help_text=help_text)
    field = next((text for kind, text in _FILTER_TEXTS if isinstance(definition, kind)), StrictCharField)
    return field(required=False, trim_whitespace=False, help_text=help_text)


BulkFilterSerializer = type("BulkFilterSerializer", (StrictSerializer,), {
    "__doc__": "Which executions: the filters of GET /executions (each as its query parameter takes it), all of "
               "them met; at least one, or `all`.",
    "__module__": __name__,
    **{name: _bulk_filter_field(name) for name in bulk_selection.FILTERS},
    "all": StrictBooleanField(required=False, default=False, help_text=(
        "true: an empty filter selects every execution (without it, an empty filter is refused)")),
})


class BulkActionSerializer(StrictSerializer):
    """One action on every execution a filter selects."""

    action = ActionField(allow_blank=True, trim_whitespace=False)
    filter = BulkFilterSerializer()
    dry_run = StrictBooleanField(required=False, default=False,
                                 help_text="count what would be done, skipped and refused; do nothing")


class BulkSkippedSerializer(serializers.Serializer):
    """The executions whose status does not allow the action: nothing was asked of them."""

    count = serializers.IntegerField(min_value=0)
    statuses = serializers.DictField(child=serializers.IntegerField(min_value=1),
                                     help_text="how many, by their status (only statuses that had some)")


class BulkRefusedSerializer(serializers.Serializer):
    """The executions the action was refused on, by why; nothing changed on them."""

    count = serializers.IntegerField(min_value=0)
    permission = serializers.IntegerField(min_value=0, help_text=(
        "the user may not take the action on them (their workflow's own permission)"))
    status = serializers.DictField(child=serializers.IntegerField(min_value=1), help_text=(
        "their status changed while the request ran, to one that does not allow the action: how many, by "
        "the status they had then"))
    gone = serializers.IntegerField(min_value=0, help_text="deleted while the request ran")


class BulkOutcomeSerializer(serializers.Serializer):
    """What a bulk action did (or, with dry_run, would do): each execution selected is counted once,
    as done, skipped or refused."""

    action = serializers.CharField()
    dry_run = serializers.BooleanField()
    matched = serializers.IntegerField(min_value=0, help_text="the executions the filter selected: done + "
                                                              "skipped + refused")
    done = serializers.IntegerField(min_value=0, help_text="acted on (with dry_run: would be)")
    skipped = BulkSkippedSerializer()
    refused = BulkRefusedSerializer()
    stopped = serializers.CharField(allow_null=True, help_text=(
        "always null here (a run the message broker stopped is answered 503 broker_unavailable)"))
