"""The public operations on schedules (``workflows_app.schedules``), the one service every door
calls: what is stored is checked once — the workflow and its parameters as a start checks them,
the timing, the overlap policy, the seconds —; each change plans the next slot as it should; each
action needs its permission and hides the schedules of a workflow hidden from the user. On the
database alone: a trigger's message goes out on commit, which these tests capture without sending."""

import datetime
import uuid

import pytest

from tests.api.conftest import GUARDED, OPERATOR, VIEWER, make_user, register_guarded
from tests.typed_workflows import register as register_typed
from workflows_app import clock, schedules
from workflows_app.errors import ParameterError, PermissionRefused, RegistrationError, ValueRefused
from workflows_app.models import Execution, Schedule, ScheduleSlot
from workflows_app.states import SlotOutcome

pytestmark = pytest.mark.django_db

UTC = datetime.timezone.utc
T0 = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def at():
    """``at.now``: the engine's clock, moved by the test (``at.now = ...``)."""

    class At:
        now = T0

    moment = At()
    with clock.using(lambda: moment.now):
        yield moment


def test_create_stores_the_schedule_with_its_first_slot_planned(at):
    every = schedules.create("demo", {"n": 2}, interval=60, overlap="allow", catchup_window=30, jitter=5)
    stored = Schedule.objects.get(pk=every.pk)
    assert (stored.workflow_id, stored.parameters, stored.interval, stored.cron) == ("demo", {"n": 2}, 60, "")
    assert (stored.overlap, stored.catchup_window, stored.jitter, stored.paused) == ("allow", 30, 5, False)
    assert stored.next_run_at == T0 + datetime.timedelta(seconds=60) and stored.last_run_at is None

    # 03:00 in Paris is 02:00 UTC in winter: the cron expression is read in its time zone.
    nightly = schedules.create("demo", cron="0 3 * * *", timezone="Europe/Paris")
    assert nightly.next_run_at == datetime.datetime(2026, 3, 2, 2, 0, tzinfo=UTC)
    assert nightly.timezone == "Europe/Paris" and nightly.interval is None


def test_a_schedule_created_paused_has_no_next_slot_and_names_its_creator(at):
    user = make_user("ann", OPERATOR)
    schedule = schedules.create("demo", interval=60, paused=True, user=user)
    assert schedule.paused and schedule.next_run_at is None and schedule.created_by == "ann"


@pytest.mark.parametrize("fields, names", [
    ({"interval": 60, "parameters": {"nope": 1}}, "nope"),  # a parameter the workflow does not have
    ({}, "cron"),  # neither cron nor interval
    ({"interval": 60, "cron": "* * * * *"}, "cron"),  # both
    ({"interval": 0}, "interval"),
    ({"interval": True}, "interval"),
    ({"cron": "61 * * * *"}, "cron"),
    ({"cron": "* * *"}, "cron"),
    ({"interval": 60, "timezone": "Mars/Olympus"}, "timezone"),
    ({"interval": 60, "timezone": "Europe/Paris\x00"}, "timezone"),
    ({"interval": 60, "overlap": "sometimes"}, "overlap"),
    ({"interval": 60, "catchup_window": -1}, "catchup_window"),
    ({"interval": 60, "jitter": 1.5}, "jitter"),
    ({"interval": 60, "jitter": 10**12}, "jitter"),
    ({"interval": 60, "paused": "yes"}, "paused"),
])
def test_what_cannot_be_a_schedule_is_refused_naming_the_field_and_nothing_is_stored(fields, names):
    with pytest.raises(ParameterError) as refused:
        schedules.create("demo", **fields)
    assert names in str(refused.value)
    assert Schedule.objects.count() == 0


def test_the_parameters_are_checked_as_a_start_checks_them(monkeypatch):
    typed = register_typed(monkeypatch)
    with pytest.raises(ParameterError, match="parameter 'n': expected integer"):
        schedules.create(typed, {"n": "three"}, interval=60)
    with pytest.raises(ParameterError, match=r"missing required parameter\(s\): n"):
        schedules.create(typed, {}, interval=60)  # n is required: every slot would fail
    with pytest.raises(RegistrationError):
        schedules.create("no-such-workflow", interval=60)
    assert Schedule.objects.count() == 0
    assert schedules.create(typed, {"n": 3}, interval=60).parameters == {"n": 3}


@pytest.mark.parametrize("parameters, why", [
    ({"agent": "a\x00b"}, "null characters"), ({"agent": "\ud800"}, "lone surrogates"), ({"n": float("nan")}, "NaN"),
    ({"agent": "x" * (3 * 1024 * 1024)}, "MAX_PAYLOAD_BYTES"),
])
def test_a_value_that_cannot_be_stored_is_refused(parameters, why):
    with pytest.raises(ParameterError, match=why) as refused:
        schedules.create("demo", parameters, interval=60)
    if why == "MAX_PAYLOAD_BYTES":  # told apart: the API answers 413 for it, 400 for the rest
        assert isinstance(refused.value, ValueRefused) and refused.value.too_large
    assert Schedule.objects.count() == 0


def test_an_update_changes_what_it_is_given_and_plans_again_only_when_the_timing_changes(at):
    schedule = schedules.create("demo", cron="0 * * * *")
    planned = schedule.next_run_at
    at.now = T0 + datetime.timedelta(minutes=90)

    same = schedules.update(schedule.pk, parameters={"n": 5}, overlap="buffer_one")
    assert (same.parameters, same.overlap, same.next_run_at) == ({"n": 5}, "buffer_one", planned)

    # Giving an interval clears the cron expression; its slots count from the schedule's creation.
    moved = schedules.update(schedule.pk, interval=3600)
    assert (moved.cron, moved.interval) == ("", 3600)
    assert moved.next_run_at == T0 + datetime.timedelta(hours=2)
    back = schedules.update(schedule.pk, cron="30 * * * *")
    assert (back.cron, back.interval) == ("30 * * * *", None)
    assert back.next_run_at == T0 + datetime.timedelta(hours=2, minutes=30)
    assert Schedule.objects.get(pk=schedule.pk).parameters == {"n": 5}


def test_an_update_is_checked_whole_and_refused_without_a_change(monkeypatch, at):
    typed = register_typed(monkeypatch)
    schedule = schedules.create(typed, {"n": 1}, interval=60)
    for changes, match in [({"parameters": {"n": "one"}}, "expected integer"), ({"cron": "nope"}, "cron"),
                           ({"workflow_id": "demo"}, "workflow_id"), ({"jitter": -5}, "jitter")]:
        with pytest.raises(ParameterError, match=match):
            schedules.update(schedule.pk, **changes)
    stored = Schedule.objects.get(pk=schedule.pk)
    assert (stored.workflow_id, stored.parameters, stored.interval, stored.jitter) == (typed, {"n": 1}, 60, 0)
    with pytest.raises(Schedule.DoesNotExist):
        schedules.update(uuid.uuid4(), jitter=1)
    with pytest.raises(Schedule.DoesNotExist):
        schedules.update("not-a-uuid", jitter=1)


def test_pause_stops_the_slots_and_resume_plans_from_now(at):
    schedule = schedules.create("demo", interval=600)
    paused = schedules.pause(schedule.pk)
    assert paused.paused and Schedule.objects.get(pk=schedule.pk).next_run_at is None
    assert schedules.pause(schedule.pk).paused, "pausing again changes nothing"

    at.now = T0 + datetime.timedelta(hours=5, seconds=1)
    resumed = schedules.resume(schedule.pk)
    assert not resumed.paused
    # The slots that fell while it was paused are not run: the next is the first after now.
    assert resumed.next_run_at == T0 + datetime.timedelta(hours=5, minutes=10)


def test_resuming_a_schedule_that_is_not_paused_keeps_its_overdue_slot(at):
    schedule = schedules.create("demo", interval=60)
    at.now = T0 + datetime.timedelta(minutes=10)  # no manager fired it meanwhile
    assert schedules.resume(schedule.pk).next_run_at == T0 + datetime.timedelta(seconds=60)


def test_trigger_starts_a_run_now_even_paused(at, django_capture_on_commit_callbacks):
    schedule = schedules.create("demo", {"n": 1}, interval=3600, paused=True)
    with django_capture_on_commit_callbacks():
        slot = schedules.trigger(schedule.pk)
    assert slot.outcome == SlotOutcome.STARTED and slot.slot == T0
    execution = Execution.objects.get(pk=slot.execution_id)
    assert (execution.schedule_id, execution.scheduled_for, execution.parameters) == (schedule.pk, T0, {"n": 1})
    assert Schedule.objects.get(pk=schedule.pk).paused, "a trigger does not resume it"


def test_deleting_a_schedule_keeps_its_executions(at, django_capture_on_commit_callbacks):
    schedule = schedules.create("demo", interval=3600)
    with django_capture_on_commit_callbacks():
        slot = schedules.trigger(schedule.pk)
    schedules.delete(schedule.pk)
    assert not Schedule.objects.exists() and not ScheduleSlot.objects.exists()
    execution = Execution.objects.get(pk=slot.execution_id)
    assert execution.schedule_id is None and execution.scheduled_for == T0


# --- who may do what ------------------------------------------------------------------------------

ACTIONS = {
    "update": lambda pk, user: schedules.update(pk, jitter=1, user=user),
    "pause": lambda pk, user: schedules.pause(pk, user=user),
    "resume": lambda pk, user: schedules.resume(pk, user=user),
    "trigger": lambda pk, user: schedules.trigger(pk, user=user),
    "delete": lambda pk, user: schedules.delete(pk, user=user),
}
#: The permission each needs (beyond none: a viewer has only view_execution).
NEEDS = {"update": "change_execution", "pause": "change_execution", "resume": "change_execution",
         "trigger": "add_execution", "delete": "delete_execution"}


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_each_action_needs_its_permission_and_a_refusal_changes_nothing(action, django_capture_on_commit_callbacks):
    schedule = schedules.create("demo", interval=60)
    before = Schedule.objects.filter(pk=schedule.pk).values().get()
    viewer = make_user("viewer", VIEWER)
    with pytest.raises(PermissionRefused) as refused:
        ACTIONS[action](schedule.pk, viewer)
    assert NEEDS[action] in str(refused.value) and str(schedule.pk) in str(refused.value)
    assert Schedule.objects.filter(pk=schedule.pk).values().get() == before and not ScheduleSlot.objects.exists()

    allowed = make_user("allowed", (NEEDS[action],))
    with django_capture_on_commit_callbacks():
        ACTIONS[action](schedule.pk, allowed)


def test_creating_needs_what_starting_the_workflow_needs(monkeypatch):
    with pytest.raises(PermissionRefused, match="add_execution"):
        schedules.create("demo", interval=60, user=make_user("viewer", VIEWER))
    guarded = register_guarded(monkeypatch)
    with pytest.raises(PermissionRefused, match="auth.change_user"):
        schedules.create(guarded, interval=60, user=make_user("ops", OPERATOR))
    assert Schedule.objects.count() == 0


def test_a_schedule_of_a_hidden_workflow_is_not_there_for_that_user(monkeypatch):
    register_guarded(monkeypatch)
    hidden = schedules.create(GUARDED, interval=60)
    shown = schedules.create("demo", interval=60)
    ops = make_user("ops", OPERATOR + ("delete_execution",))
    assert list(schedules.visible(ops)) == [shown]
    assert list(schedules.visible(make_user("nobody"))) == []
    for act in [*ACTIONS.values(), lambda pk, user: schedules.get(pk, user=user)]:
        with pytest.raises(Schedule.DoesNotExist):
            act(hidden.pk, ops)
    assert schedules.get(hidden.pk) == hidden, "the server's own access sees every schedule"
