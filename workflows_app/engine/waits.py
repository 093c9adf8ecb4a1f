"""Stored waits: what ``ctx.await_event``, ``ctx.wait_for_event`` and ``ctx.sleep`` leave behind
while the workflow holds no thread or process.

A wait is settled only inside ``advance`` (under the execution's row lock), when a replay of the
workflow reaches it: it takes the oldest ``event_received`` event of its name that no wait took
yet, or times out once its deadline passed. The outcome is stored, so every later replay sees the
same one. What wakes a waiting execution: the advance each delivered event sends, and the
manager's tick for waits whose deadline passed (:func:`due_executions`).
"""

import math
from datetime import timedelta

from django.db.models import Exists, Min, OuterRef, Q

from workflows_app import clock, values
from workflows_app.errors import ValueRefused
from workflows_app.models import Event, Wait
from workflows_app.states import EventType, ExecutionStatus, WaitKind, WaitOutcome

#: The longest event name (the API's limit, and what ``Wait.name`` stores).
MAX_NAME_LENGTH = 255


def check_name(name):
    """An event name is a non-empty string of at most MAX_NAME_LENGTH characters."""
    if not isinstance(name, str):
        raise TypeError(f"an event name is a string, not {type(name).__name__} ({name!r})")
    if not name or len(name) > MAX_NAME_LENGTH:
        raise ValueError(f"an event name has 1 to {MAX_NAME_LENGTH} characters, not {len(name)}")
    problem = values.string_problem(name)
    if problem:
        raise ValueRefused("an event name", problem)
    return name


def check_seconds(value, what, *, optional=False):
    """A duration is a finite number of seconds, 0 or more (``None`` where ``optional``)."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} is a number of seconds, not {type(value).__name__} ({value!r})")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} is a finite number of seconds, 0 or more, not {value!r}")
    return float(value)


def open_wait(execution, key, kind, name="", timeout=None, after=()):
    """Store a new wait (the first replay that reaches it); its deadline counts from now.
    ``after``: the steps the workflow code awaited last before it (as a step's ``after``)."""
    deadline = clock.now() + timedelta(seconds=timeout) if timeout is not None else None
    return Wait.objects.create(execution=execution, key=key, kind=kind, name=name, timeout=timeout, deadline=deadline,
                               after=list(after))


def oldest_untaken_event(execution_id, name):
    """The oldest ``event_received`` event named ``name`` that no wait has taken."""
    return (Event.objects.filter(execution_id=execution_id, type=EventType.EVENT_RECEIVED, data__name=name,
                                 taken_by__isnull=True)
            .order_by("id").only("id", "timestamp", "data").first())


def settle(wait, now=None):
    """Settle ``wait`` if it can be now, and store its outcome; returns it (updated in place).

    An event wait takes the oldest event of its name not yet taken — one that arrived by its
    deadline; an event that arrived later is left to the next wait. Past its deadline with no
    such event, an event wait times out and a sleep has elapsed."""
    if wait.outcome != WaitOutcome.WAITING:
        return wait
    now = now or clock.now()
    if wait.kind == WaitKind.EVENT:
        event = oldest_untaken_event(wait.execution_id, wait.name)
        if event is not None and (wait.deadline is None or event.timestamp <= wait.deadline):
            return _store_outcome(wait, WaitOutcome.RECEIVED, now, event=event, payload=event.data.get("payload"))
    if wait.deadline is not None and wait.deadline <= now:
        outcome = WaitOutcome.TIMED_OUT if wait.kind == WaitKind.EVENT else WaitOutcome.ELAPSED
        return _store_outcome(wait, outcome, now)
    return wait


def cancel(wait):
    """``cancel_step`` of a wait: ``cancelled`` unless it has ended already (then no-op)."""
    if wait.outcome != WaitOutcome.WAITING:
        return False
    _store_outcome(wait, WaitOutcome.CANCELLED, clock.now())
    return True


def _store_outcome(wait, outcome, now, **fields):
    changes = {"outcome": outcome, "resolved_at": now, **fields}
    # Compare-and-set: a wait's outcome, once stored, is never replaced.
    if Wait.objects.filter(pk=wait.pk, outcome=WaitOutcome.WAITING).update(**changes) == 1:
        for name, value in changes.items():
            setattr(wait, name, value)
    else:
        wait.refresh_from_db()
    return wait


def due_executions(now=None):
    """Ids of started executions with an open wait whose deadline passed: the tick advances
    them (one query on the partial index of open deadlines). An execution that ended is never
    woken by its waits."""
    now = now or clock.now()
    due = Wait.objects.filter(outcome=WaitOutcome.WAITING, deadline__lte=now, execution__status=ExecutionStatus.STARTED)
    return set(due.values_list("execution_id", flat=True).distinct())


def next_deadline(after):
    """The earliest deadline of an open wait of a started execution later than ``after``, or
    ``None`` (the test harness moves its clock there)."""
    return (Wait.objects.filter(outcome=WaitOutcome.WAITING, deadline__gt=after, execution__status=ExecutionStatus.STARTED)
            .aggregate(at=Min("deadline"))["at"])


def only_waiting(stale, after=None, upto=None):
    """A filter for executions that wait on a stored wait and have no event delivered before
    ``stale`` left to take: nothing but an event delivery (which sends its own advance) or the
    tick (for a deadline) can move them, so the sweep for lost wake-ups leaves them alone. An
    event untaken since before ``stale`` may have lost its advance: that execution is swept.

    ``after`` and ``upto`` bound the ids of the executions filtered (None: no bound), for the
    subqueries too: a planner that reads a subquery's rows once, into a hash, instead of once
    per execution, reads only that range of its index, not every open wait and every event."""
    bounds = {}
    if after is not None:
        bounds["execution_id__gt"] = after
    if upto is not None:
        bounds["execution_id__lte"] = upto
    open_waits = Wait.objects.filter(execution_id=OuterRef("pk"), outcome=WaitOutcome.WAITING, **bounds)
    untaken = Event.objects.filter(execution_id=OuterRef("pk"), type=EventType.EVENT_RECEIVED, taken_by__isnull=True,
                                   timestamp__lte=stale, **bounds)
    return Q(Exists(open_waits)) & ~Q(Exists(untaken))
