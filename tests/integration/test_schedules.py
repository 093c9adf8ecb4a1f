"""Schedules fired by real managers: three managers racing for every slot of a one-second
schedule — one of them SIGKILLed midway — start each slot exactly once, with no slot lost; and a
manager started again after all of them were stopped records the slots that fell in the downtime
as missed, and the schedule goes on."""

import itertools
import time
from datetime import timedelta

import pytest

from workflows_app.engine import schedules as engine
from workflows_app.engine import timetable
from workflows_app.models import Execution, Schedule, ScheduleSlot
from workflows_app.states import EXECUTION_TERMINAL

pytestmark = [pytest.mark.integration]

SECOND = timedelta(seconds=1)


def make(**fields) -> Schedule:
    schedule = Schedule(**fields)
    engine.plan_next(schedule)
    schedule.save()
    return schedule


def stop_firing(stack, schedule):
    """Pause the schedule, then wait for every execution it started to end."""
    Schedule.objects.filter(pk=schedule.pk).update(paused=True, next_run_at=None)
    stack.wait_for(lambda: not Execution.objects.filter(schedule=schedule).exclude(status__in=EXECUTION_TERMINAL)
                   .exists(), 60, "the schedule's executions to end")


def every_slot(schedule):
    """The slots recorded, a missed run expanded into its slots: ``{slot: record}``."""
    found = {}
    for record in ScheduleSlot.objects.filter(schedule=schedule).order_by("slot"):
        if record.outcome == "missed":
            covered = list(itertools.islice(timetable.slots(interval=schedule.interval, anchor=schedule.created_at,
                                                            after=record.slot - timedelta(microseconds=1)), record.slots))
            assert covered[-1] == record.until
            found.update({slot: record for slot in covered})
        else:
            assert record.slot not in found
            found[record.slot] = record
    return found


def assert_each_slot_once_and_none_lost(schedule):
    found = every_slot(schedule)
    slots = sorted(found)
    assert slots[0] == schedule.created_at + SECOND
    assert slots == [slots[0] + k * SECOND for k in range(len(slots))], "a slot between the first and the last is lost"
    executions = list(Execution.objects.filter(schedule=schedule))
    scheduled = [e.scheduled_for for e in executions]
    assert len(scheduled) == len(set(scheduled)), "two executions for one slot"
    started = {slot: record for slot, record in found.items() if record.outcome == "started"}
    assert {slot: record.execution_id for slot, record in started.items()} == {e.scheduled_for: e.pk for e in executions}
    assert {e.status for e in executions} == {"completed"}
    return found


@pytest.mark.django_db(transaction=True)
def test_three_managers_one_killed_start_each_slot_of_a_one_second_schedule_once(stack):
    host = stack.agent_name("sched")
    stack.start_agent(host)
    managers = [stack.start_manager(concurrency=2, name=f"manager-{n}") for n in (1, 2, 3)]
    stack.wait_for_agent(host)
    schedule = make(workflow_id="it_single", parameters={"agent": host, "tag": "sched", "seconds": 0}, interval=1,
                    overlap="allow")
    stack.wait_for(lambda: Execution.objects.filter(schedule=schedule, status="completed").exists(), 60,
                   "the schedule's first run")
    time.sleep(4)
    # The manager whose ticks come first after each slot fires most of them: killed mid-run (maybe
    # holding the schedule's lock, or inside a firing), the others take over.
    fired = f"schedule {schedule.pk} (it_single): slot"
    busiest = max(managers, key=lambda m: m.log_text().count(fired))
    assert busiest.log_text().count(fired) >= 2
    stack.kill(busiest)
    killed_at = Schedule.objects.get(pk=schedule.pk).next_run_at
    time.sleep(5)
    stop_firing(stack, schedule)

    found = assert_each_slot_once_and_none_lost(schedule)
    assert len(found) >= 9
    assert {record.outcome for record in found.values()} == {"started"}  # allow, and no manager was late
    assert len([slot for slot in found if slot >= killed_at]) >= 4  # fired by the survivors
    survivors = [m for m in managers if m is not busiest]
    assert any(fired in m.log_text() for m in survivors)
    for manager in survivors:
        assert "Traceback" not in manager.log_text(), manager.log_tail()


@pytest.mark.django_db(transaction=True)
def test_a_manager_started_after_a_downtime_records_the_missed_slots_and_the_schedule_goes_on(stack):
    manager = stack.start_manager(concurrency=2)
    schedule = make(workflow_id="it_sleep", parameters={"seconds": 0}, interval=1, overlap="allow")
    stack.wait_for(lambda: Execution.objects.filter(schedule=schedule, status="completed").exists(), 60,
                   "the schedule's first run")
    time.sleep(1)
    stack.stop(manager)
    stopped = ScheduleSlot.objects.filter(schedule=schedule).latest("slot").slot
    # More than LATE_GRACE_SECONDS (the window is 0) with no manager, counting the restart.
    time.sleep(engine.LATE_GRACE_SECONDS)
    restarted = stack.restart(manager)
    stack.wait_for(lambda: ScheduleSlot.objects.filter(schedule=schedule, outcome="missed").exists(), 60,
                   "the missed slots to be recorded")
    back = ScheduleSlot.objects.get(schedule=schedule, outcome="missed")
    stack.wait_for(lambda: Execution.objects.filter(schedule=schedule, scheduled_for__gt=back.until + 2 * SECOND,
                                                    status="completed").exists(), 60, "the schedule to go on")
    stop_firing(stack, schedule)

    found = assert_each_slot_once_and_none_lost(schedule)
    # The downtime's slots: the older ones one missed run right after the last slot before it,
    # the ones within the grace started late, then the schedule on time again.
    assert back.slot == stopped + SECOND
    assert back.slots >= 2 and back.until == back.slot + (back.slots - 1) * SECOND
    assert "not started: more than 10s late" in back.reason
    outcomes = [found[slot].outcome for slot in sorted(found)]
    assert set(outcomes[outcomes.index("missed") + back.slots:]) == {"started"}
    assert "Traceback" not in restarted.log_text(), restarted.log_tail()
