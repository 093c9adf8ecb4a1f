"""What ``/api/v1/schedules`` takes and answers.

The input serializers are strict, as the executions' are (``workflows_app.api.serializers``):
each field takes its JSON type only, a key that is not a field is refused, strings and JSON
values go through the one value check. Whether the workflow, its parameters and the timing fit
together — and whether the slots are the minimum interval apart for the user — is the service's
one check (``workflows_app.schedules.check``), the same for every door.
"""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from workflows_app import schedules
from workflows_app.api.fields import JSONObjectField, StrictBooleanField, StrictCharField, StrictChoiceField
from workflows_app.api.serializers import APIModelSerializer, StrictSerializer, WorkflowIdField
from workflows_app.engine import timetable
from workflows_app.models import Schedule, ScheduleSlot
from workflows_app.states import OverlapPolicy

#: The actions of ``POST /schedules/{id}``.
ACTIONS = ("pause", "resume", "trigger")

OVERLAP_HELP = ("what a slot does while the schedule's previous run is still active: skip (recorded, not run), "
                "buffer_one (it runs once the active run ends; one waits at most), allow (it runs beside), "
                "cancel_other (the active run is cancelled, and it runs)")


# --- output ----------------------------------------------------------------------------------

class ScheduleSlotSerializer(APIModelSerializer):
    """One slot of a schedule and what became of it."""

    class Meta:
        model = ScheduleSlot
        fields = ("slot", "outcome", "execution", "slots", "until", "reason", "recorded_at")
        read_only_fields = fields
        extra_kwargs = {
            "slot": {"help_text": "when it fell due (for a run of missed slots, the first)"},
            "outcome": {"help_text": "started (its execution), buffered (waits for the active run to end), "
                                     "skipped (the overlap policy, or why in reason), missed (it fell while no "
                                     "manager ran, outside the catch-up window)"},
            "execution": {"help_text": "the execution it started, or null"},
            "slots": {"help_text": "how many slots this record stands for (a run of missed ones is one record)"},
            "until": {"help_text": "for a run of missed slots, the last; else null"},
            "reason": {"help_text": "why it was skipped or missed; '' when it started"},
        }


class ScheduleSerializer(APIModelSerializer):
    """A schedule, as a list shows it: without its parameters."""

    class Meta:
        model = Schedule
        fields = ("id", "workflow_id", "cron", "interval", "timezone", "overlap", "catchup_window", "jitter",
                  "paused", "next_run_at", "last_run_at", "buffered_slot", "created_by", "created_at", "updated_at")
        read_only_fields = fields
        extra_kwargs = {
            "cron": {"help_text": "a cron expression (5 fields), read in timezone; '' for an interval schedule"},
            "interval": {"help_text": "seconds between two slots; null for a cron schedule"},
            "timezone": {"help_text": "the IANA time zone the cron expression is read in"},
            "overlap": {"help_text": OVERLAP_HELP},
            "catchup_window": {"help_text": "seconds: a slot reached late (no manager ran) still starts if it is no "
                                            "later than this (at least 30), plus the jitter; older ones are recorded "
                                            "missed"},
            "jitter": {"help_text": "seconds: each start is delayed by a pseudo-random time below this, the same "
                                    "for every manager"},
            "next_run_at": {"help_text": "the next slot (its jitter not added); null while paused"},
            "last_run_at": {"help_text": "the slot of the last execution it started; null before the first"},
            "buffered_slot": {"help_text": "buffer_one: the slot waiting for the active run to end; null for none"},
        }


class ScheduleDetailSerializer(ScheduleSerializer):
    """A schedule with its parameters and its latest slots (missed runs included)."""

    parameters = serializers.DictField(read_only=True, help_text="the parameters of each execution it starts")
    recent_slots = ScheduleSlotSerializer(many=True, read_only=True, help_text=(
        f"its latest {schedules.RECENT_SLOTS} slots, newest first; its executions: GET executions?schedule=<id>"))

    class Meta(ScheduleSerializer.Meta):
        fields = ScheduleSerializer.Meta.fields[:2] + ("parameters",) + ScheduleSerializer.Meta.fields[2:] + (
            "recent_slots",)
        read_only_fields = fields


class ScheduleActionResultSerializer(ScheduleDetailSerializer):
    """The schedule once the action was taken; for ``trigger``, the slot it made too."""

    triggered = ScheduleSlotSerializer(read_only=True, allow_null=True, help_text=(
        "trigger: the slot it made and what became of it (started, with its execution; buffered; skipped); "
        "null for pause and resume"))

    class Meta(ScheduleDetailSerializer.Meta):
        fields = (*ScheduleDetailSerializer.Meta.fields, "triggered")
        read_only_fields = fields


def schedule_detail(schedule) -> dict:
    """The schedule as ``GET /schedules/{id}``, a create and a change answer it."""
    schedule.recent_slots = schedules.recent_slots(schedule)
    return ScheduleDetailSerializer(schedule).data


def action_result(schedule, triggered=None) -> dict:
    """The answer of ``POST /schedules/{id}``: the schedule, and the slot a trigger made (or null)."""
    schedule.recent_slots = schedules.recent_slots(schedule)
    schedule.triggered = triggered
    return ScheduleActionResultSerializer(schedule).data


# --- input -----------------------------------------------------------------------------------

class StrictIntegerField(serializers.IntegerField):
    """A JSON integer only (DRF's IntegerField also takes ``"10"``, ``10.0`` and booleans)."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class ScheduleFieldsSerializer(StrictSerializer):
    """The fields of a schedule a client sets (all optional: what ``PATCH`` takes)."""

    parameters = JSONObjectField(required=False, allow_null=True,
                                 help_text="the parameters of each execution; checked against the workflow as a "
                                           "start's")
    cron = StrictCharField(required=False, allow_blank=True, allow_null=True, max_length=255, trim_whitespace=False,
                           help_text="a cron expression (5 fields: minute hour day-of-month month day-of-week), "
                                     "read in timezone; or give interval. Its slots must be at least the server's "
                                     "minimum interval apart (WORKFLOWS['SCHEDULE_MIN_INTERVAL'], default 10 s; "
                                     "not for a superuser)")
    interval = StrictIntegerField(required=False, allow_null=True, min_value=1, max_value=timetable.MAX_INTERVAL,
                                  help_text="seconds between two slots, counted from the schedule's creation; "
                                            "or give cron. At least the server's minimum interval "
                                            "(WORKFLOWS['SCHEDULE_MIN_INTERVAL'], default 10; not for a superuser)")
    timezone = StrictCharField(required=False, max_length=64, trim_whitespace=False,
                               help_text="an IANA time zone (Europe/Paris) the cron expression is read in; "
                                         "default UTC")
    overlap = StrictChoiceField(choices=OverlapPolicy.choices, required=False,
                                help_text=OVERLAP_HELP + "; default skip")
    catchup_window = StrictIntegerField(required=False, min_value=0, max_value=schedules.MAX_SECONDS,
                                        help_text="seconds a slot reached late (no manager ran) may still start "
                                                  "(at least 30 count); older ones are recorded missed; default 0")
    jitter = StrictIntegerField(required=False, min_value=0, max_value=schedules.MAX_SECONDS,
                                help_text="seconds: each start is delayed by a pseudo-random time below this; "
                                          "default 0")
    paused = StrictBooleanField(required=False, help_text="no slot fires while paused; default false")


class CreateScheduleSerializer(ScheduleFieldsSerializer):
    """What creates a schedule: a workflow, its parameters, and a cron expression or an interval."""

    workflow_id = WorkflowIdField(trim_whitespace=False, help_text="the registered workflow it starts")


class UpdateScheduleSerializer(ScheduleFieldsSerializer):
    """What ``PATCH`` changes: the fields given. Giving cron clears interval and giving interval
    clears cron; the workflow is not changed (a key ``workflow_id`` is refused)."""


@extend_schema_field({"type": "string", "enum": list(ACTIONS)})
class ScheduleActionField(StrictCharField):
    """A string; one that is none of ACTIONS is answered ``unknown_action`` by the view."""

    document_no_nul = False


class ScheduleActionSerializer(StrictSerializer):
    """An action on a schedule."""

    action = ScheduleActionField(allow_blank=True, trim_whitespace=False)
