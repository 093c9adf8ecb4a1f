"""Firing schedules: the managers start each slot of every schedule once.

A schedule's next slot is stored (``Schedule.next_run_at``, planned by :func:`plan_next`); every
manager's tick calls :func:`fire_due`, which takes each schedule that fell due under its row
lock (``select_for_update(skip_locked=True)``: another manager firing it is passed over), records
what became of each slot (``ScheduleSlot``, unique per schedule and slot) and moves
``next_run_at`` on, in one transaction. So any number of managers start each slot exactly once,
and a slot that fell while no manager ran is found when one starts again. The rules:

**Slots.** A new schedule's first slot is the first after its creation; an interval's slots fall
on its creation time plus whole intervals, a cron expression's as ``engine.timetable`` says
(daylight-saving rule included). A change of the timing plans the next slot again from then.

**Catch-up.** A slot starts when a manager reaches it no later than ``catchup_window`` seconds
after it — at least :data:`LATE_GRACE_SECONDS` (10 s), so that a busy or quickly restarted
manager loses no slot — plus the schedule's ``jitter``. An older slot (the managers were
stopped, the database was away) is *missed*: never started, and recorded: each run of missed
slots is one ``missed`` ``ScheduleSlot`` (``slot`` the first, ``until`` the last, ``slots`` how
many — a week's downtime of an every-minute schedule is one record), logged as a warning. The
slots inside the window start in order, oldest first, each under the overlap policy — so with
``skip`` the first one starts and, while it runs, the others are skipped; with ``allow`` all
start.

**Overlap.** When a slot falls while an execution the schedule started (on a slot or by a
trigger) is still active — pending, queued, started or stopping —:

- ``skip`` (the default): the slot is recorded ``skipped``, nothing starts;
- ``buffer_one``: the slot waits, recorded ``buffered`` (``Schedule.buffered_slot``), and
  starts as soon as no execution of the schedule is active any more (it then reads
  ``started``); while one slot waits, a further one is skipped. A buffered slot starts even if the
  schedule was paused meanwhile: it was accepted before;
- ``allow``: it starts beside the active ones;
- ``cancel_other``: the active ones are cancelled (as ``cancel`` does: running operations are
  asked to stop) and the slot starts at once. Of several slots a manager fires in one go (a
  catch-up), only the newest starts; the earlier ones are recorded ``skipped``.

**Starting.** Each slot's execution has the schedule's workflow and parameters, ``schedule``
and ``scheduled_for`` (the slot) and the schedule's ``created_by``; it is started with the
server's access. One that cannot be built any more (the workflow is no longer registered, the
parameters no longer fit it) leaves its slot ``skipped`` with the reason, and the schedule
carries on with its next slot.

**Jitter.** With ``jitter`` seconds, each slot starts a pseudo-random delay in ``[0, jitter)``
after it (:func:`delay`): the same for every manager (it is derived from the schedule's id and
the slot), so they agree on when it is due. ``scheduled_for`` stays the slot itself.

**Pause.** A paused schedule has no next slot: nothing fires; resuming plans the next slot from
the time of the resume — the slots of the pause are not caught up, and not recorded.

**Trigger.** :func:`trigger` starts a run at once, its slot the time of the trigger, under the
same overlap policy, paused or not; the next slot does not move.
"""

import hashlib
import logging
from datetime import UTC, datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import Min

from workflows_app import clock, outages
from workflows_app.engine import starts, stopping, timetable
from workflows_app.errors import ParameterError, RegistrationError
from workflows_app.models import Execution, PausedWorkflow, Schedule, ScheduleSlot
from workflows_app.states import EXECUTION_ACTIVE, EXECUTION_TERMINAL, ExecutionStatus, OverlapPolicy, SlotOutcome

logger = logging.getLogger(__name__)

#: A slot this late (in seconds) still starts, whatever the schedule's ``catchup_window``: the
#: latency of a busy manager or of a quick restart is no downtime (as Temporal's smallest catch-up
#: window).
LATE_GRACE_SECONDS = 10
#: The most slots one schedule fires, or a run of missed ones one pass counts (a year of an
#: every-minute cron expression), in one transaction; the next tick carries on.
SLOTS_PER_PASS = 100
MISSED_PER_PASS = 20_000

_ONE = timedelta(microseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_REASON = ScheduleSlot._meta.get_field("reason").max_length


def plan_next(schedule, now=None) -> Schedule:
    """Set ``schedule.next_run_at`` (not saved) to its first slot after ``now`` (the engine's
    clock by default), or to None while it is paused. Returns the schedule."""
    if schedule.paused:
        schedule.next_run_at = None
    else:
        schedule.next_run_at = _next(schedule, now or clock.now())
    return schedule


def delay(schedule, slot) -> timedelta:
    """How long after ``slot`` it starts: the schedule's jitter, the same in every process."""
    if not schedule.jitter:
        return timedelta(0)
    micros = (slot - _EPOCH) // _ONE
    digest = hashlib.sha256(f"{schedule.pk}:{micros}".encode()).digest()
    return timedelta(microseconds=int.from_bytes(digest[:8], "big") % (schedule.jitter * 1_000_000))


def due_at(schedule, slot):
    """When ``slot`` of ``schedule`` falls due: the slot plus its jitter."""
    return slot + delay(schedule, slot)


def fire_due(now=None) -> int:
    """Fire what fell due by ``now`` (the managers' tick): each schedule due, in its own
    transaction; returns how many slots were recorded. A schedule that fails to fire (the
    database refused a statement) is logged and left for the next tick, and the others fire; a
    database that cannot be reached raises."""
    now = now or clock.now()
    recorded = 0
    # Read on the partial index of unpaused schedules; a schedule whose jitter is not over yet is
    # read again on each tick until it is (its due time is not stored).
    candidates = (Schedule.objects.filter(paused=False, next_run_at__lte=now).order_by("next_run_at")
                  .values_list("pk", flat=True))
    for pk in list(candidates):
        try:
            recorded += _fire(pk, now)
        except Exception as exc:
            if outages.is_outage(exc):
                raise  # the tick's to handle: the database is away, not this schedule wrong
            logger.exception("schedule %s: could not fire its due slots; the next tick tries again", pk)
    return recorded


def trigger(schedule) -> ScheduleSlot:
    """Start a run of ``schedule`` now (its slot: the engine's clock), under its overlap policy,
    paused or not; its next slot does not move. The returned slot's outcome says what happened:
    ``started`` (with its ``execution``), ``buffered`` or ``skipped`` (with the ``reason``)."""
    with transaction.atomic():
        schedule = Schedule.objects.select_for_update().get(pk=schedule.pk)
        active = _start_buffered_if_free(schedule)
        record = _take(schedule, clock.now(), active)
        _save(schedule)
    return record


def start_buffered(schedule_id):
    """Start the buffered slot of the schedule if none of its executions is active any more."""
    with transaction.atomic():
        schedule = Schedule.objects.select_for_update().filter(pk=schedule_id, buffered_slot__isnull=False).first()
        if schedule is None:
            return
        _start_buffered_if_free(schedule)
        _save(schedule)


def start_buffered_when_ended(execution, source, target, event):
    """A reaction: an execution of a schedule that ended lets its buffered slot start."""
    if target in EXECUTION_TERMINAL and execution.schedule_id:
        start_buffered(execution.schedule_id)


def start_every_free_buffered():
    """The tick's safety net: every buffered slot whose schedule has no active execution (the
    reaction that would have started it was lost with its process)."""
    for pk in list(Schedule.objects.filter(buffered_slot__isnull=False).values_list("pk", flat=True)):
        start_buffered(pk)


def next_deadline(after):
    """The earliest time later than ``after`` at which a slot falls due (its jitter added), or
    None: where the test harness moves its clock."""
    unpaused = Schedule.objects.filter(paused=False, next_run_at__isnull=False)
    found = [unpaused.filter(jitter=0, next_run_at__gt=after).aggregate(at=Min("next_run_at"))["at"]]
    for schedule in unpaused.filter(jitter__gt=0).only("pk", "jitter", "next_run_at"):
        found.append(due_at(schedule, schedule.next_run_at))
    return min((at for at in found if at is not None and at > after), default=None)


# --- firing one schedule ------------------------------------------------------------------

def _fire(pk, now) -> int:
    with transaction.atomic():
        schedule = (Schedule.objects.select_for_update(skip_locked=True)
                    .filter(pk=pk, paused=False, next_run_at__lte=now).first())
        if schedule is None or due_at(schedule, schedule.next_run_at) > now:
            return 0  # another manager fires it, or it moved on, or its jitter is not over
        recorded = 0
        limit = timedelta(seconds=max(schedule.catchup_window, LATE_GRACE_SECONDS) + schedule.jitter)
        if schedule.next_run_at < now - limit:
            recorded += _record_missed(schedule, now - limit)
            if schedule.next_run_at is None or schedule.next_run_at < now - limit:
                # More missed slots than one pass counts (the next tick goes on), or no slot after them.
                _save(schedule)
                return recorded
        due = []
        for slot in _slots_from(schedule, schedule.next_run_at):
            if slot is None or due_at(schedule, slot) > now or len(due) == SLOTS_PER_PASS:
                schedule.next_run_at = slot
                break
            due.append(slot)
        active = _start_buffered_if_free(schedule)
        for index, slot in enumerate(due):
            superseded = schedule.overlap == OverlapPolicy.CANCEL_OTHER and index < len(due) - 1
            _take(schedule, slot, active, superseded_by=due[-1] if superseded else None)
            recorded += 1
        _save(schedule)
    return recorded


def _record_missed(schedule, cutoff) -> int:
    """Record the slots from ``next_run_at`` up to before ``cutoff`` as one missed run — joined to
    the missed run recorded last when it goes on from there — and move ``next_run_at`` past them
    (at most MISSED_PER_PASS of a cron expression's: the rest are the next pass'). Returns how
    many records were stored (0 or 1)."""
    start = schedule.next_run_at
    if schedule.interval is not None:
        number, first, last = timetable.count(interval=schedule.interval, after=start - _ONE, until=cutoff - _ONE,
                                              anchor=schedule.created_at)
    else:
        number, first, last = 0, None, None
        for slot in _slots_from(schedule, start):
            if slot is None or slot >= cutoff or number == MISSED_PER_PASS:
                break
            number, first, last = number + 1, first or slot, slot
    if not number:  # next_run_at was no slot of the timing (it changed): plan again
        schedule.next_run_at = _next(schedule, start)
        return 0
    schedule.next_run_at = _next(schedule, last)
    previous = schedule.slots.order_by("-slot").first()
    if previous is not None and previous.outcome == SlotOutcome.MISSED and _next(schedule, previous.until) == first:
        previous.slots += number
        previous.until = last
        previous.reason = _missed_reason(schedule, previous.slots)
        previous.save(update_fields=["slots", "until", "reason"])
    else:
        _record(schedule, first, SlotOutcome.MISSED, reason=_missed_reason(schedule, number), until=last, slots=number)
    logger.warning("schedule %s (%s): %s slots from %s to %s missed (more than %ss late)", schedule.pk,
                   schedule.workflow_id, number, first.isoformat(), last.isoformat(),
                   max(schedule.catchup_window, LATE_GRACE_SECONDS) + schedule.jitter)
    return 1


def _missed_reason(schedule, number):
    return (f"{number} slot{'s' if number != 1 else ''} not started: more than "
            f"{max(schedule.catchup_window, LATE_GRACE_SECONDS) + schedule.jitter}s late when a manager reached them "
            f"(catchup_window {schedule.catchup_window}s)")


def _take(schedule, slot, active, superseded_by=None) -> ScheduleSlot:
    """Record ``slot`` and start it, or not, under the overlap policy. ``active``: the schedule's
    active executions, kept up to date. Returns the record."""
    record = _decide(schedule, slot, active, superseded_by)
    logger.info("schedule %s (%s): slot %s %s%s", schedule.pk, schedule.workflow_id, slot.isoformat(), record.outcome,
                f" (execution {record.execution_id})" if record.execution_id else f": {record.reason}")
    return record


def _decide(schedule, slot, active, superseded_by):
    if PausedWorkflow.is_paused(schedule.workflow_id):
        return _record(schedule, slot, SlotOutcome.SKIPPED, reason=f"its workflow {schedule.workflow_id} is paused")
    if superseded_by is not None:
        return _record(schedule, slot, SlotOutcome.SKIPPED,
                       reason=f"a later slot ({superseded_by.isoformat()}) starts instead (overlap: cancel_other)")
    if active:
        others = ", ".join(str(pk) for pk in active[:3]) + (" ..." if len(active) > 3 else "")
        if schedule.overlap == OverlapPolicy.SKIP:
            return _record(schedule, slot, SlotOutcome.SKIPPED,
                           reason=f"its execution {others} is still active (overlap: skip)")
        if schedule.overlap == OverlapPolicy.BUFFER_ONE:
            if schedule.buffered_slot is not None:
                return _record(schedule, slot, SlotOutcome.SKIPPED, reason=(
                    f"the slot {schedule.buffered_slot.isoformat()} waits already (overlap: buffer_one)"))
            record = _record(schedule, slot, SlotOutcome.BUFFERED,
                             reason=f"waits for its execution {others} to end (overlap: buffer_one)")
            if record.outcome == SlotOutcome.BUFFERED:
                schedule.buffered_slot = slot
            return record
        if schedule.overlap == OverlapPolicy.CANCEL_OTHER:
            for pk in active:
                _cancel(schedule, pk)
            active.clear()
    return _start(schedule, slot, active)


def _start(schedule, slot, active, record=None) -> ScheduleSlot:
    """Start the execution of ``slot`` (into ``record`` if it has one: a buffered slot)."""
    try:
        execution, created = starts.build(schedule.workflow_id, schedule.parameters, schedule=schedule,
                                          scheduled_for=slot, created_by=schedule.created_by)
    except (RegistrationError, ParameterError) as exc:
        logger.warning("schedule %s: slot %s not started: %s", schedule.pk, slot.isoformat(), exc)
        return _record(schedule, slot, SlotOutcome.SKIPPED, reason=f"cannot start: {exc}", into=record)
    try:
        with transaction.atomic():
            starts.create(execution, created)
            record = _record(schedule, slot, SlotOutcome.STARTED, execution=execution, into=record, backstop=False)
    except IntegrityError:
        # The slot is stored already: another manager fired it (a race the row lock leaves
        # only to a database without one). It is done.
        logger.info("schedule %s: slot %s was started by another manager", schedule.pk, slot.isoformat())
        stored = ScheduleSlot.objects.filter(schedule=schedule, slot=slot).first()
        if stored is not None:
            return stored
        # Its execution is there, not its record: recorded now, with that execution.
        other = Execution.objects.filter(schedule=schedule, scheduled_for=slot).first()
        return _record(schedule, slot, SlotOutcome.STARTED, execution=other, into=record)
    active.append(execution.pk)
    schedule.last_run_at = max(filter(None, (schedule.last_run_at, slot)))
    return record


def _start_buffered_if_free(schedule):
    """The schedule's active executions (ids, oldest first), after starting its buffered slot
    if there were none."""
    active = list(Execution.objects.filter(schedule=schedule, status__in=EXECUTION_ACTIVE)
                  .order_by("created_at").values_list("pk", flat=True))
    if schedule.buffered_slot is not None and not active:
        slot, schedule.buffered_slot = schedule.buffered_slot, None
        record = ScheduleSlot.objects.filter(schedule=schedule, slot=slot).first()
        _start(schedule, slot, active, record=record)
    return active


def _cancel(schedule, execution_id):
    """Cancel an active execution of the schedule (cancel_other), as the engine's cancel does."""
    execution = Execution.objects.select_for_update(no_key=True).get(pk=execution_id)
    if execution.status in EXECUTION_ACTIVE:
        stopping.stop(execution, ExecutionStatus.CANCELLING, f"cancel by its schedule's next slot ({schedule.pk}, "
                                                             "overlap: cancel_other)")


def _record(schedule, slot, outcome, *, execution=None, reason="", into=None, backstop=True, until=None,
            slots=1) -> ScheduleSlot:
    """Store what became of ``slot`` (update ``into``, a stored record, if given). With
    ``backstop``, a record another manager stored first is returned instead (under a savepoint)."""
    reason = reason if len(reason) <= _REASON else reason[:_REASON - 3] + "..."
    if into is not None:
        into.outcome, into.execution, into.reason, into.recorded_at = outcome, execution, reason, clock.now()
        into.save(update_fields=["outcome", "execution", "reason", "recorded_at"])
        return into
    record = ScheduleSlot(schedule=schedule, slot=slot, outcome=outcome, execution=execution, reason=reason,
                          until=until, slots=slots, recorded_at=clock.now())
    if not backstop:
        record.save(force_insert=True)
        return record
    try:
        with transaction.atomic():
            record.save(force_insert=True)
    except IntegrityError:
        logger.info("schedule %s: slot %s was recorded by another manager", schedule.pk, slot.isoformat())
        return ScheduleSlot.objects.filter(schedule=schedule, slot=slot).first() or record
    return record


def _save(schedule):
    schedule.save(update_fields=["next_run_at", "last_run_at", "buffered_slot"])


def _slots_from(schedule, start):
    """The schedule's slots from ``start`` (itself one) on; None after the last."""
    yield from timetable.slots(cron=schedule.cron, interval=schedule.interval, timezone=schedule.timezone,
                               after=start - _ONE, anchor=schedule.created_at)
    yield None


def _next(schedule, after):
    return timetable.next_slot(cron=schedule.cron, interval=schedule.interval, timezone=schedule.timezone,
                               after=after, anchor=schedule.created_at)
