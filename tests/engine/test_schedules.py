"""Firing schedules (``engine.schedules``) in the test harness, with its clock: one execution per
slot with ``scheduled_for`` the slot; each overlap policy; the catch-up window after a downtime
(the older slots one ``missed`` record); pause and resume; jitter; a slot whose workflow cannot
start; a slot another manager stored first; and cron schedules across the daylight-saving
changes of Europe/Paris and America/New_York, their executions' ``scheduled_for`` exact."""

from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.test import TestCase, override_settings

from workflows_app.engine import schedules as engine
from workflows_app.engine import tick
from workflows_app.models import Event, Execution, Schedule, ScheduleSlot
from workflows_app.states import SlotOutcome
from workflows_app.testing.harness import Harness

PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")
MINUTE = timedelta(minutes=1)


@pytest.fixture(autouse=True)
def with_the_schedule_workflows():
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=["tests.schedule_workflows"]):
        yield


@pytest.fixture
def harness_from(db):
    """``harness_from(start)``: the test harness with its clock at ``start``."""
    with ExitStack() as stack:
        yield lambda start: stack.enter_context(Harness(start=start))


def make(**fields) -> Schedule:
    fields.setdefault("workflow_id", "sched_nap")
    schedule = Schedule(**fields)
    engine.plan_next(schedule)
    schedule.save()
    return schedule


def committed(function, *args):
    """``function(*args)``, then what it left for the commit (the test's transaction never
    commits): the harness then runs the executions it started."""
    with TestCase.captureOnCommitCallbacks(execute=True):
        return function(*args)


def slots_of(schedule):
    return list(ScheduleSlot.objects.filter(schedule=schedule).order_by("slot"))


def outcomes(schedule):
    return [(record.slot - schedule.created_at, record.outcome) for record in slots_of(schedule)]


def executions_of(schedule):
    return list(Execution.objects.filter(schedule=schedule).order_by("scheduled_for"))


# --- one execution per slot ----------------------------------------------------------------------

def test_each_slot_of_an_interval_starts_one_execution_with_its_slot(switchyard):
    schedule = make(interval=60, parameters={"seconds": 0}, created_by="ops")
    start = schedule.created_at
    assert schedule.next_run_at == start + MINUTE

    switchyard.advance(minutes=5)

    executions = executions_of(schedule)
    assert [e.scheduled_for for e in executions] == [start + k * MINUTE for k in range(1, 6)]
    assert {(e.status, e.workflow_id, e.created_by) for e in executions} == {("completed", "sched_nap", "ops")}
    assert all(e.created_at >= e.scheduled_for for e in executions)
    assert [(r.outcome, r.execution_id) for r in slots_of(schedule)] == [("started", e.pk) for e in executions]
    schedule.refresh_from_db()
    assert schedule.last_run_at == start + 5 * MINUTE
    assert schedule.next_run_at == start + 6 * MINUTE
    created = Event.objects.get(execution=executions[0], message="created: sched_nap")
    assert created.data["schedule"] == str(schedule.pk)


def test_a_slot_is_due_at_its_time_not_before(switchyard):
    schedule = make(interval=60)
    assert engine.fire_due(schedule.created_at + MINUTE - timedelta(microseconds=1)) == 0
    assert tick.next_deadline(switchyard.clock.current()) == schedule.created_at + MINUTE
    assert not ScheduleSlot.objects.exists()


def test_the_slots_of_a_paused_workflow_are_skipped_and_the_next_after_its_unpause_starts(switchyard):
    from workflows_app import services

    schedule = make(interval=60, parameters={"seconds": 0})
    services.pause_workflow("sched_nap")
    switchyard.advance(minutes=2)
    assert outcomes(schedule) == [(MINUTE, "skipped"), (2 * MINUTE, "skipped")]
    assert slots_of(schedule)[0].reason == "its workflow sched_nap is paused"
    services.unpause_workflow("sched_nap")
    switchyard.advance(minutes=1)
    assert outcomes(schedule)[-1] == (3 * MINUTE, "started")
    assert [e.status for e in executions_of(schedule)] == ["completed"]


# --- overlap policies ------------------------------------------------------------------------------

def test_skip_records_the_slots_that_fall_while_the_last_run_is_active(switchyard):
    schedule = make(interval=60, parameters={"seconds": 150}, overlap="skip")
    switchyard.advance(minutes=5)
    assert outcomes(schedule) == [(MINUTE, "started"), (2 * MINUTE, "skipped"), (3 * MINUTE, "skipped"),
                                  (4 * MINUTE, "started"), (5 * MINUTE, "skipped")]
    first = executions_of(schedule)[0]
    assert f"its execution {first.pk} is still active (overlap: skip)" == slots_of(schedule)[1].reason
    assert len(executions_of(schedule)) == 2


def test_buffer_one_keeps_one_slot_waiting_and_starts_it_when_the_active_run_ends(switchyard):
    schedule = make(interval=60, parameters={"seconds": 130}, overlap="buffer_one")
    switchyard.advance(seconds=390)

    assert outcomes(schedule) == [(MINUTE, "started"), (2 * MINUTE, "started"), (3 * MINUTE, "skipped"),
                                  (4 * MINUTE, "started"), (5 * MINUTE, "skipped"), (6 * MINUTE, "buffered")]
    first, second, third = executions_of(schedule)
    # The buffered slot started as soon as the run before it ended, its slot kept.
    assert second.scheduled_for == schedule.created_at + 2 * MINUTE
    assert first.ended_at <= second.created_at < first.ended_at + timedelta(seconds=1)
    assert second.ended_at <= third.created_at < second.ended_at + timedelta(seconds=1)
    assert "waits already (overlap: buffer_one)" in slots_of(schedule)[2].reason
    schedule.refresh_from_db()
    assert schedule.buffered_slot == schedule.created_at + 6 * MINUTE
    assert schedule.last_run_at == schedule.created_at + 4 * MINUTE


def test_allow_starts_each_slot_beside_the_active_runs(switchyard):
    schedule = make(interval=60, parameters={"seconds": 130}, overlap="allow")
    switchyard.advance(minutes=3)
    assert [outcome for _, outcome in outcomes(schedule)] == ["started"] * 3
    assert [e.status for e in executions_of(schedule)] == ["started"] * 3  # three run at once


def test_cancel_other_cancels_the_active_run_and_starts_the_slot(switchyard):
    schedule = make(interval=60, parameters={"seconds": 130}, overlap="cancel_other")
    switchyard.advance(minutes=3)
    assert [outcome for _, outcome in outcomes(schedule)] == ["started"] * 3
    first, second, third = executions_of(schedule)
    assert [e.status for e in (first, second, third)] == ["cancelled", "cancelled", "started"]
    assert first.ended_at < second.created_at + timedelta(seconds=1)
    assert Event.objects.filter(execution=first, message__contains="overlap: cancel_other").exists()


# --- catch-up after a downtime --------------------------------------------------------------------

@pytest.mark.parametrize("overlap, started", [("allow", 10), ("skip", 1)])
def test_after_a_downtime_the_slots_in_the_window_start_and_the_older_are_one_missed_record(switchyard, overlap,
                                                                                              started):
    schedule = make(interval=60, catchup_window=600, overlap=overlap)
    start = schedule.created_at
    down = switchyard.clock.current() + timedelta(hours=1)
    switchyard.clock.move_to(down)  # no manager ran for an hour
    switchyard.advance(0)

    records = slots_of(schedule)
    missed = records[0]
    # Older than 600 s: the slots 1..50; 51..60 (and none later) in the window.
    assert (missed.outcome, missed.slot, missed.until, missed.slots) == ("missed", start + MINUTE, start + 50 * MINUTE, 50)
    assert "50 slots not started: more than 600s late" in missed.reason
    assert [r.slot for r in records[1:]] == [start + k * MINUTE for k in range(51, 61)]
    assert [e.scheduled_for for e in executions_of(schedule)][:started] == [start + k * MINUTE for k in range(51, 51 + started)]
    assert len(executions_of(schedule)) == started
    schedule.refresh_from_db()
    assert schedule.next_run_at == start + 61 * MINUTE


def test_a_downtime_shorter_than_the_grace_loses_no_slot_with_no_window(switchyard):
    schedule = make(interval=60)
    switchyard.clock.move_to(schedule.created_at + MINUTE + timedelta(seconds=engine.LATE_GRACE_SECONDS - 1))
    switchyard.advance(0)
    assert [r.outcome for r in slots_of(schedule)] == ["started"]


def test_a_long_run_of_missed_cron_slots_is_counted_over_several_passes_into_one_record(switchyard, monkeypatch):
    monkeypatch.setattr(engine, "MISSED_PER_PASS", 7)
    schedule = make(cron="* * * * *", timezone="Europe/Paris")
    first = schedule.next_run_at
    now = first + timedelta(hours=1, seconds=10)
    switchyard.clock.move_to(now)
    passes = 0
    while ScheduleSlot.objects.filter(schedule=schedule).exclude(outcome="missed").count() == 0:
        engine.fire_due(now)
        passes += 1
    missed = ScheduleSlot.objects.get(schedule=schedule, outcome="missed")
    # Slots more than 10 s late: first .. first + 59 min (60 of them); first + 60 min is on time.
    assert (missed.slot, missed.until, missed.slots) == (first, first + 59 * MINUTE, 60)
    assert passes == 9
    assert ScheduleSlot.objects.get(schedule=schedule, outcome="started").slot == first + 60 * MINUTE


def test_a_missed_run_after_another_is_a_record_of_its_own(switchyard):
    schedule = make(interval=60)
    switchyard.clock.move_to(switchyard.clock.current() + timedelta(minutes=10))
    switchyard.advance(0)
    switchyard.advance(minutes=1)
    switchyard.clock.move_to(switchyard.clock.current() + timedelta(minutes=10))
    switchyard.advance(0)
    # Each downtime: slots 1-9 more than 10 s late, slot 10 on time; then one on time between them.
    assert [(r.outcome, r.slots) for r in slots_of(schedule)] == [("missed", 9), ("started", 1), ("started", 1),
                                                                  ("missed", 9), ("started", 1)]


# --- pause, resume, trigger ------------------------------------------------------------------------

def test_a_paused_schedule_fires_nothing_and_resumes_from_now_without_a_burst(switchyard):
    schedule = make(interval=60, paused=True)
    assert schedule.next_run_at is None
    stale = make(interval=60)
    Schedule.objects.filter(pk=stale.pk).update(paused=True)  # paused, its next slot still stored
    switchyard.advance(minutes=30)
    assert not ScheduleSlot.objects.exists() and not Execution.objects.exists()

    schedule.paused = False
    engine.plan_next(schedule)
    schedule.save()
    resumed = switchyard.clock.current()
    assert resumed < schedule.next_run_at <= resumed + MINUTE
    switchyard.advance(minutes=2)
    records = slots_of(schedule)
    assert [r.outcome for r in records] == ["started", "started"]
    assert records[0].slot == schedule.next_run_at


def test_trigger_starts_a_run_now_under_the_overlap_policy_paused_or_not(switchyard):
    schedule = make(interval=3600, parameters={"seconds": 600}, paused=True)
    record = committed(engine.trigger, schedule)
    assert record.outcome == SlotOutcome.STARTED
    assert record.execution.scheduled_for == record.slot
    assert record.slot <= switchyard.clock.current()
    again = committed(engine.trigger, schedule)
    assert again.outcome == SlotOutcome.SKIPPED and str(record.execution_id) in again.reason
    schedule.refresh_from_db()
    assert schedule.next_run_at is None and schedule.last_run_at == record.slot

    buffering = make(interval=3600, parameters={"seconds": 600}, overlap="buffer_one")
    assert committed(engine.trigger, buffering).outcome == SlotOutcome.STARTED
    waiting = committed(engine.trigger, buffering)
    assert waiting.outcome == SlotOutcome.BUFFERED
    switchyard.advance(minutes=11)
    waiting.refresh_from_db()
    assert waiting.outcome == SlotOutcome.STARTED and waiting.execution.scheduled_for == waiting.slot


# --- jitter -----------------------------------------------------------------------------------------

def test_jitter_delays_each_start_by_the_same_amount_in_every_computation(switchyard):
    schedule = make(interval=3600, jitter=600)
    same = Schedule.objects.get(pk=schedule.pk)  # as another manager reads it
    slots = [schedule.next_run_at + k * timedelta(hours=1) for k in range(200)]
    delays = [engine.delay(schedule, slot) for slot in slots]
    assert delays == [engine.delay(same, slot) for slot in slots]
    assert all(timedelta(0) <= d < timedelta(seconds=600) for d in delays)
    assert len(set(delays)) > 150  # spread, not one value
    assert max(delays) > timedelta(seconds=500) and min(delays) < timedelta(seconds=100)
    assert tick.next_deadline(switchyard.clock.current()) == schedule.next_run_at + delays[0]

    assert engine.fire_due(schedule.next_run_at + delays[0] - timedelta(microseconds=1)) == 0
    switchyard.advance(hours=3, minutes=10)
    executions = executions_of(schedule)
    assert [e.scheduled_for for e in executions] == slots[:3]
    for execution, slot, delay in zip(executions, slots, delays):
        assert slot + delay <= execution.created_at < slot + delay + timedelta(seconds=1)


# --- a slot that cannot start, a slot stored already -------------------------------------------------

def test_a_slot_whose_workflow_cannot_start_is_skipped_with_the_reason_and_the_others_go_on(switchyard):
    gone = make(interval=60, workflow_id="sched_gone")  # its workflow is no longer registered
    unfit = make(interval=60, parameters={"minutes": 5})  # no longer a parameter of the workflow
    fine = make(interval=60)
    switchyard.advance(minutes=2)

    assert [r.outcome for r in slots_of(gone)] == ["skipped", "skipped"]
    assert "cannot start: no workflow named 'sched_gone' is registered" in slots_of(gone)[0].reason
    assert [r.outcome for r in slots_of(unfit)] == ["skipped", "skipped"]
    assert slots_of(unfit)[0].reason == "cannot start: workflow 'sched_nap': unknown parameter(s): minutes"
    assert [r.outcome for r in slots_of(fine)] == ["started", "started"]

    Schedule.objects.filter(pk=unfit.pk).update(parameters={"seconds": 0})  # mended: it carries on
    switchyard.advance(minutes=1)
    assert [r.outcome for r in slots_of(unfit)] == ["skipped", "skipped", "started"]


def test_a_slot_another_manager_stored_first_is_done(switchyard):
    schedule = make(interval=60)
    first = schedule.next_run_at
    ScheduleSlot.objects.create(schedule=schedule, slot=first, outcome="started")
    other = make(interval=60)
    Execution.objects.create(workflow_id="sched_nap", schedule=other, scheduled_for=other.next_run_at,
                             status="completed")
    switchyard.advance(minutes=2)

    assert [r.outcome for r in slots_of(schedule)] == ["started", "started"]
    assert [e.scheduled_for for e in executions_of(schedule)] == [first + MINUTE]
    assert [e.scheduled_for for e in executions_of(other)] == [other.created_at + MINUTE, other.created_at + 2 * MINUTE]
    assert [(r.outcome, r.execution.scheduled_for) for r in slots_of(other)] == [
        ("started", other.created_at + MINUTE), ("started", other.created_at + 2 * MINUTE)]
    assert not ScheduleSlot.objects.filter(outcome="missed").exists()


def test_a_schedule_locked_by_another_manager_is_passed_over(switchyard):
    schedule = make(interval=60)
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=schedule.next_run_at + timedelta(hours=1))
    # Read as due, but another manager moved it on meanwhile: the re-read under the lock sees it.
    assert engine._fire(schedule.pk, schedule.next_run_at) == 0


# --- daylight saving ---------------------------------------------------------------------------------

def utc(*args):
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize("zone, start, daily, change", [
    # Paris, spring 2027-03-28 (02:00 CET -> 03:00 CEST): 02:30 that day fires at 03:00 CEST.
    (PARIS, utc(2027, 3, 27), [utc(2027, 3, 27, 1, 30), utc(2027, 3, 28, 1, 0), utc(2027, 3, 29, 0, 30)],
     ("28 02:", 0)),
    # Paris, autumn 2027-10-31 (03:00 CEST -> 02:00 CET): 02:30 fires once, at its first occurrence.
    (PARIS, utc(2027, 10, 30), [utc(2027, 10, 30, 0, 30), utc(2027, 10, 31, 0, 30), utc(2027, 11, 1, 1, 30)],
     ("31 02:", 2)),
    # New York, spring 2027-03-14 (02:00 EST -> 03:00 EDT).
    (NEW_YORK, utc(2027, 3, 13, 5), [utc(2027, 3, 13, 7, 30), utc(2027, 3, 14, 7, 0), utc(2027, 3, 15, 6, 30)],
     ("14 02:", 0)),
    # New York, autumn 2027-11-07 (02:00 EDT -> 01:00 EST): 01:00 happens twice, 02:30 once.
    (NEW_YORK, utc(2027, 11, 6, 4), [utc(2027, 11, 6, 6, 30), utc(2027, 11, 7, 7, 30), utc(2027, 11, 8, 7, 30)],
     ("07 01:", 2)),
])
def test_daily_and_hourly_schedules_across_a_daylight_saving_change(harness_from, zone, start, daily, change):
    harness = harness_from(start)
    every_day = make(cron="30 2 * * *", timezone=zone.key)
    every_hour = make(cron="0 * * * *", timezone=zone.key)
    harness.advance(days=2, hours=23)

    assert [e.scheduled_for for e in executions_of(every_day)] == daily
    hourly = [e.scheduled_for for e in executions_of(every_hour)]
    assert hourly == [start + timedelta(hours=k) for k in range(1, 72)]  # every real hour, none twice
    # The hour of the change: none in spring (it does not happen), both passes in autumn.
    hour, times = change
    assert sum(1 for slot in hourly if slot.astimezone(zone).strftime("%d %H:").startswith(hour)) == times
    assert {e.status for e in executions_of(every_day) + executions_of(every_hour)} == {"completed"}
