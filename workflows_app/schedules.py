"""The public operations on schedules, used by every entry point (API, admin, commands).

A schedule starts executions of a workflow with given parameters on a cron expression or every
so many seconds; the managers fire it (``engine.schedules``). What a schedule holds is checked
here, once, for every door: the workflow and its parameters as a start checks them — a
schedule that would fail at every slot is never stored —, its timing (``engine.timetable.check``),
its overlap policy, catch-up window and jitter. A refusal raises ``RegistrationError`` (no such
workflow) or ``ParameterError`` naming the field (``ValueRefused`` for a value that cannot be
stored); nothing is changed.

Each operation takes the ``user`` it acts for and raises ``PermissionRefused`` (nothing changed)
when that user may not (``workflows_app.permissions``: a schedule needs what its executions
need); ``user=None``, the default, is the server's own access (the commands). A schedule of a
workflow whose own permission the user lacks is, for that user, not there:
``Schedule.DoesNotExist``, as for an id that names no schedule.

What a schedule starts, and when, is what starting its workflow allows: creating one, triggering
one, and changing what it starts or when — its parameters, its cron expression, interval or time
zone, unpausing it (an update or ``resume``) — need what a start needs, ``permissions.check(user,
"start", workflow)``, the start endpoint's own rule (``add_execution`` and the workflow's own
permission), besides what the action itself needs. Pausing, deleting and the other fields (overlap
policy, catch-up window, jitter: they start no slot the timing does not have) need only the
action's permission.

A user who is not a superuser creates or retimes a schedule only with slots at least
``WORKFLOWS["SCHEDULE_MIN_INTERVAL"]`` seconds apart (:func:`min_interval`, :func:`check_spacing`):
a timing of more frequent slots is a ``ParameterError`` naming the field and the minimum. A
superuser, and the server's own access (the commands, run by an operator with a shell on the
server, who is attributed to no user), are not held to it.
"""

import uuid

from django.db import transaction

from workflows_app import clock, permissions, values
from workflows_app.conf import workflows_settings
from workflows_app.engine import schedules as engine
from workflows_app.engine import timetable
from workflows_app.errors import ParameterError
from workflows_app.models import Schedule, ScheduleSlot
from workflows_app.registry import get_workflow
from workflows_app.states import OverlapPolicy

#: Longest catch-up window and jitter, in seconds (about 31 years): more than any schedule needs,
#: and what the database's integer column holds.
MAX_SECONDS = 10**9
#: What an update may change: all but the workflow (a schedule of another workflow is another
#: schedule: its executions and slots are the first one's history).
EDITABLE = ("parameters", "cron", "interval", "timezone", "overlap", "catchup_window", "jitter", "paused")
#: What, when changed, moves the next slot.
TIMING = ("cron", "interval", "timezone")
#: What, when changed, changes what the schedule starts or when: it needs what starting needs (as
#: unpausing does).
STARTING = ("parameters", *TIMING)
#: How many of its latest slots a schedule's document shows.
RECENT_SLOTS = 20


def visible(user, queryset=None):
    """The schedules ``user`` may view (none without ``view_execution``; not those of a
    workflow whose own permission it lacks)."""
    return permissions.visible(user, Schedule.objects.all() if queryset is None else queryset)


def get(schedule_id, *, user=None) -> Schedule:
    """The schedule, if ``user`` may view it; else ``Schedule.DoesNotExist``."""
    return visible(user).get(pk=_uuid(schedule_id))


def check(workflow_id, parameters=None, *, cron="", interval=None, timezone="UTC", overlap=OverlapPolicy.SKIP,
          catchup_window=0, jitter=0, paused=False, min_interval=0) -> dict:
    """The fields of a schedule as they are stored, once each is checked: what :func:`create`
    and :func:`update` store, and what the admin's form checks before it saves. ``cron`` None
    is none (""), ``parameters`` None is ``{}``. ``min_interval``: the fewest seconds its slots
    may be apart (:func:`check_spacing`; 0, the default: no minimum)."""
    if not isinstance(workflow_id, str):
        raise ParameterError(f"workflow_id must be a string, not {type(workflow_id).__name__}")
    problem = values.string_problem(workflow_id)
    if problem:
        raise ParameterError(f"workflow_id: {problem}")
    definition = get_workflow(workflow_id)  # RegistrationError
    parameters = {} if parameters is None else parameters
    try:
        definition.check_parameters(parameters)
    except ParameterError as exc:
        raise ParameterError(f"parameters: {exc}") from None
    values.check(parameters, "parameters")
    cron = "" if cron is None else cron
    timetable.check(cron=cron, interval=interval, timezone=timezone)
    if not isinstance(overlap, str) or overlap not in OverlapPolicy.values:
        raise ParameterError(f"overlap must be one of {', '.join(OverlapPolicy.values)}, not {_shown(overlap)}")
    for name, seconds in (("catchup_window", catchup_window), ("jitter", jitter)):
        if isinstance(seconds, bool) or not isinstance(seconds, int) or not 0 <= seconds <= MAX_SECONDS:
            raise ParameterError(f"{name} must be a whole number of seconds from 0 to {MAX_SECONDS}, "
                                 f"not {_shown(seconds)}")
    if not isinstance(paused, bool):
        raise ParameterError(f"paused must be true or false, not {_shown(paused)}")
    check_spacing(cron=cron, interval=interval, timezone=timezone, minimum=min_interval)
    return {"workflow_id": definition.name, "parameters": parameters, "cron": cron, "interval": interval,
            "timezone": timezone, "overlap": overlap, "catchup_window": catchup_window, "jitter": jitter,
            "paused": paused}


def create(workflow_id, parameters=None, *, cron="", interval=None, timezone="UTC", overlap=OverlapPolicy.SKIP,
           catchup_window=0, jitter=0, paused=False, created_by="", user=None) -> Schedule:
    """Store a schedule of ``workflow_id`` (every argument as :func:`check` takes it) with its
    first slot planned (none while paused). Needs what starting the workflow needs; its slots are
    at least :func:`min_interval` apart for ``user``. ``created_by`` defaults to the user's name."""
    permissions.check(user, "schedule", workflow_id if isinstance(workflow_id, str) else None,
                      target=f"workflow {str(workflow_id)[:100]!r}")
    fields = check(workflow_id, parameters, cron=cron, interval=interval, timezone=timezone, overlap=overlap,
                   catchup_window=catchup_window, jitter=jitter, paused=paused, min_interval=min_interval(user))
    if not created_by and user is not None:
        created_by = user.get_username()
    if not isinstance(created_by, str) or values.string_problem(created_by):
        raise ParameterError("created_by must be a string that can be stored")
    now = clock.now()
    schedule = Schedule(**fields, created_by=created_by[:150], created_at=now, updated_at=now)
    engine.plan_next(schedule, now)
    schedule.save(force_insert=True)
    return schedule


def update(schedule_id, *, user=None, **changes) -> Schedule:
    """Change the fields of :data:`EDITABLE` given (checked together, as :func:`check_change`
    does). Giving ``cron`` clears the interval and giving ``interval`` clears the cron
    expression, so that a schedule moves from one to the other in one change. A change of the
    timing or of ``paused`` plans the next slot again, from now. Needs ``change``, and what
    starting the workflow needs to change what it starts or when (:func:`check_change`)."""
    changes = _given(changes)
    with transaction.atomic():
        schedule = _find(user, "change", schedule_id, lock=True)
        current = {name: getattr(schedule, name) for name in EDITABLE}
        fields = check_change(schedule, user=user, **changes)
        replan = any(fields[name] != current[name] for name in (*TIMING, "paused"))
        for name in EDITABLE:
            setattr(schedule, name, fields[name])
        now = clock.now()
        if replan:
            engine.plan_next(schedule, now)
        schedule.updated_at = now
        schedule.save()
    return schedule


def check_change(schedule, *, user=None, **changes) -> dict:
    """The fields ``schedule`` has once ``changes`` (of :data:`EDITABLE`) are made, each checked
    as :func:`check` checks it: what :func:`update` stores, and what the admin's change form
    checks. ``user`` must also be allowed what the changes do — the fields of :data:`STARTING`
    changed, or the schedule unpaused, need what starting its workflow needs (``PermissionRefused``)
    — and a change of the timing must keep its slots :func:`min_interval` apart for ``user``.
    What the action itself needs (``change``) is its caller's to check. A field given its current
    value is no change."""
    changes = _given(changes)
    current = {name: getattr(schedule, name) for name in EDITABLE}
    fields = check(schedule.workflow_id, **{**current, **changes})
    changed = {name for name in EDITABLE if fields[name] != current[name]}
    if changed & set(STARTING) or (current["paused"] and not fields["paused"]):
        permissions.check(user, "start", schedule.workflow_id, target=f"schedule {schedule.pk}")
    if changed & set(TIMING):
        check_spacing(cron=fields["cron"], interval=fields["interval"], timezone=fields["timezone"],
                      minimum=min_interval(user))
    return fields


def min_interval(user) -> int:
    """The fewest seconds two slots of a schedule ``user`` creates or retimes may be apart:
    ``WORKFLOWS["SCHEDULE_MIN_INTERVAL"]``, or 0 (no minimum) for an active superuser and for the
    server's own access (``user=None``: the commands)."""
    if user is None or (getattr(user, "is_active", False) and getattr(user, "is_superuser", False)):
        return 0
    return workflows_settings.SCHEDULE_MIN_INTERVAL


def check_spacing(*, cron="", interval=None, timezone="UTC", minimum=0) -> None:
    """Raise ``ParameterError`` naming the field and the minimum if two consecutive slots of this
    timing (checked already, as ``timetable.check`` does) can be less than ``minimum`` seconds
    apart. An interval is its own spacing; a cron expression's closest slots are
    ``timetable.closest_slots``."""
    if not minimum:
        return
    if interval is not None:
        if interval < minimum:
            raise ParameterError(f"interval must be at least {_seconds(minimum)} (the minimum interval between two "
                                 f"slots, WORKFLOWS['SCHEDULE_MIN_INTERVAL']), not {interval}")
        return
    gap, where = timetable.closest_slots(cron, timezone, minimum, clock.now())
    if gap is not None:
        raise ParameterError(f"cron: {_shown(cron)} has slots {_seconds(gap)} apart{where}; a schedule's slots must "
                             f"be at least {_seconds(minimum)} apart (the minimum interval, "
                             "WORKFLOWS['SCHEDULE_MIN_INTERVAL'])")


def _seconds(seconds) -> str:
    return f"{seconds} second" + ("" if seconds == 1 else "s")


def delete(schedule_id, *, user=None) -> None:
    """Delete the schedule and its slots; the executions it started stay (their ``schedule``
    becomes null, their ``scheduled_for`` stays). Needs ``delete``."""
    with transaction.atomic():
        _find(user, "delete", schedule_id, lock=True).delete()


def pause(schedule_id, *, user=None) -> Schedule:
    """No slot fires until it is resumed (``next_run_at`` none); a run already started goes on.
    Pausing a paused schedule changes nothing. Needs ``pause``."""
    with transaction.atomic():
        schedule = _find(user, "pause", schedule_id, lock=True)
        if not schedule.paused:
            schedule.paused, schedule.next_run_at, schedule.updated_at = True, None, clock.now()
            schedule.save(update_fields=["paused", "next_run_at", "updated_at"])
    return schedule


def resume(schedule_id, *, user=None) -> Schedule:
    """Slots fire again from the first one after now: those that fell while it was paused are
    neither run nor recorded. Resuming a schedule that is not paused changes nothing (its next
    slot, even one overdue, stays). Needs ``resume``, and unpausing what starting the workflow
    needs."""
    with transaction.atomic():
        schedule = _find(user, "resume", schedule_id, lock=True)
        if schedule.paused:
            permissions.check(user, "start", schedule.workflow_id, target=f"schedule {schedule.pk}")
            now = clock.now()
            schedule.paused, schedule.updated_at = False, now
            engine.plan_next(schedule, now)
            schedule.save(update_fields=["paused", "next_run_at", "updated_at"])
    return schedule


def trigger(schedule_id, *, user=None) -> ScheduleSlot:
    """A run at once, paused or not, under the schedule's overlap policy: the slot it made says
    what became of it (``started`` with its execution, ``buffered``, ``skipped``). Needs what
    starting the workflow needs."""
    return engine.trigger(_find(user, "trigger", schedule_id))


#: The actions on a schedule, by the name every entry point uses; each takes the schedule's id
#: and, as a keyword, the ``user`` it acts for.
ACTIONS = {"pause": pause, "resume": resume, "trigger": trigger}


def recent_slots(schedule, limit=RECENT_SLOTS) -> list[ScheduleSlot]:
    """The schedule's latest slots, newest first: what became of each, missed runs included."""
    return list(ScheduleSlot.objects.filter(schedule_id=schedule.pk).order_by("-slot")[:limit])


def by_id_prefix(digits, shown) -> tuple[list[dict], int]:
    """The schedules whose id starts with the hexadecimal ``digits`` (lowercase): the first
    ``shown`` by id, as ``{"id", "workflow_id"}``, and how many match in all (a range of the
    primary key, as ``queries.executions_by_id_prefix``)."""
    low, high = (uuid.UUID(hex=digits.ljust(32, pad)) for pad in "0f")
    matching = Schedule.objects.filter(pk__gte=low, pk__lte=high)
    rows = list(matching.order_by("pk").values("id", "workflow_id")[:shown + 1])
    return rows[:shown], (len(rows) if len(rows) <= shown else matching.count())


def _given(changes) -> dict:
    """The changes of an update, refused if one is not of :data:`EDITABLE`; giving ``cron``
    clears the interval, giving ``interval`` the cron expression."""
    unknown = sorted(set(changes) - set(EDITABLE))
    if unknown:
        raise ParameterError(f"{', '.join(unknown)}: cannot be changed (a schedule may change "
                             f"{', '.join(EDITABLE)}; for another workflow, create another schedule)")
    changes = dict(changes)
    if "cron" in changes and "interval" not in changes:
        changes["interval"] = None
    elif "interval" in changes and "cron" not in changes:
        changes["cron"] = ""
    return changes


def _find(user, action, schedule_id, *, lock=False) -> Schedule:
    """The schedule, once ``user`` may take ``action`` on it (else ``PermissionRefused``); one of
    a workflow hidden from the user is ``Schedule.DoesNotExist``."""
    schedules = Schedule.objects.all()
    if user is not None:
        schedules = schedules.exclude(workflow_id__in=permissions.hidden_workflows(user))
    if lock:
        schedules = schedules.select_for_update()
    schedule = schedules.get(pk=_uuid(schedule_id))
    permissions.check(user, action, schedule.workflow_id, target=f"schedule {schedule.pk}")
    return schedule


def _uuid(schedule_id) -> uuid.UUID:
    """The id as a UUID; an id that is none names no schedule."""
    if isinstance(schedule_id, uuid.UUID):
        return schedule_id
    try:
        return uuid.UUID(str(schedule_id))
    except ValueError:
        raise Schedule.DoesNotExist(f"no schedule {values.printable(schedule_id)!r}") from None


def _shown(value) -> str:
    return values.printable(repr(value))[:100]
