"""The managers keep the limits of operations (``workflows_app.flow.limits``) when they send.

A step of an operation with a limit is never sent where it becomes ready. It is handed to the
gate (:func:`hold`: ``flow_wait`` "queued", still ``pending`` or ``rescheduled``; the engine's
``progress.send_many`` calls it, handed down by the app: this module sends through that one), and once that
transaction commits the operation's waiting steps are drained (:func:`drain`): under the lock of
one row per operation, so that every manager and web process decides one after the other, the
steps are taken in the order they were asked for and each is sent while its keys have room —

* a rate key: fewer attempts sent in the last period (any window of its length) than the rate;
* a concurrency key: fewer attempts ``sending``, ``sent`` or ``started`` than N —

and the others wait, saying why (``flow_wait``, and a ``log`` event the first time). A step over
the limit is sent as soon as the limit allows: when an attempt of its concurrency key ends
(:func:`slot_freed`, after that commit), when its rate window moves on (the managers'
:func:`drain_waiting`, which says when to look again), and by every tick. No countdown, no
busy loop.

Locks are taken in one order — the operation's row, then each execution's — and nothing that
holds an execution's lock takes an operation's row: :func:`hold` only marks rows.
"""

import logging
import os
import threading
from collections import defaultdict
from datetime import timedelta

from django.db import transaction

from workflows_app import clock
from workflows_app.engine import policy, progress
from workflows_app.errors import RegistrationError
from workflows_app.models import ConcurrencyKey, Operation, RateSend
from workflows_app.flow.limits import PERIODS, governs, key_of
from workflows_app.registry import get_operation
from workflows_app.states import (
    OPERATION_HOLDING_SLOT,
    OPERATION_WAITING_TO_SEND,
    EventType,
    ExecutionStatus,
    FlowWait,
    StepKind,
)
from workflows_app.transitions import record_events

logger = logging.getLogger(__name__)

#: The row of ``ConcurrencyKey`` an operation's decisions lock: the prefix, then its name.
ROW_PREFIX = "operation:"
#: Steps looked at per transaction of a drain.
BATCH = 500


# --- storing -------------------------------------------------------------------------------

def stamp(row, definition):
    """Set the keys ``row`` (an operation step, unsaved) counts against, from its operation's
    limits as registered now."""
    declared = definition.limits
    if declared.rate is not None:
        row.rate_key = definition_key("rate", definition, declared.rate_key, row)
    if declared.concurrency is not None:
        row.concurrency_key = definition_key("concurrency", definition, declared.concurrency_key, row)


def definition_key(kind, definition, key, row) -> str:
    return key_of(kind, definition.name, definition.func, key, row.args, row.kwargs, row.agent)


# --- handing over --------------------------------------------------------------------------

def hold(operations) -> list:
    """Take those of ``operations`` (about to be sent) that a limit governs: they stay as they are,
    marked ``queued`` (those not marked yet: one UPDATE), and their operations are drained once
    the transaction commits. Returns the others, to be sent as usual."""
    governed = [op for op in operations if governs(op)]
    if not governed:
        return operations
    new = [op for op in governed if not op.flow_wait]
    if new:
        Operation.objects.filter(pk__in=[op.pk for op in new], flow_wait="").update(flow_wait=FlowWait.QUEUED)
        for op in new:
            op.flow_wait = FlowWait.QUEUED
    drain_on_commit({op.operation for op in governed})
    return [op for op in operations if not governs(op)]


def drain_on_commit(names):
    """Drain the operations ``names`` once the current transaction commits (at once outside one):
    one drain per operation however many of its steps the transaction handed over or ended. In
    a manager's own process, its flow thread drains instead (:func:`drain_in`), so that the
    thread that committed (the inbox, answering claims) does not wait for it."""
    _pending.names = getattr(_pending, "names", set()) | set(names)
    scheduled = getattr(_pending, "callback", None)
    connection = transaction.get_connection()
    if scheduled is None or not any(entry[1] is scheduled for entry in connection.run_on_commit):
        _pending.callback = lambda: _drain_pending()
        transaction.on_commit(_pending.callback)


#: The operations to drain after this thread's commit, and the callback that will. A rolled back
#: transaction drops its callback but leaves its names: the next commit drains them too (which
#: finds nothing to do, or what the tick would find).
_pending = threading.local()
#: ``(pid, wake)``: the process whose flow thread drains, and how to wake it (:func:`drain_in`).
_drainer = None


def drain_in(wake):
    """From now on, this process' commits wake its flow thread (``wake()``), which drains every
    operation with waiting steps (:func:`drain_waiting`), rather than drain themselves. Its forked
    pool processes, which have no such thread, still drain themselves."""
    global _drainer
    _drainer = (os.getpid(), wake)


def _drain_pending():
    names, _pending.names, _pending.callback = sorted(getattr(_pending, "names", ())), set(), None
    if _drainer is not None and _drainer[0] == os.getpid():
        _drainer[1]()
        return
    for name in names:
        drain(name)


def slot_freed(operation):
    """An attempt of ``operation`` left ``sending``/``sent``/``started``: if its operation has a
    concurrency limit, a step waiting for the slot may go once this commits."""
    if operation.kind != StepKind.OPERATION:
        return
    try:
        declared = get_operation(operation.operation).limits
    except RegistrationError:
        return
    if declared.concurrency is not None:
        drain_on_commit([operation.operation])


# --- deciding ------------------------------------------------------------------------------

def drain(name) -> float | None:
    """Send the waiting steps of operation ``name`` that its limits let through, oldest first, and
    mark the others with why they wait. Returns the seconds until a rate window may let one
    more through (None: nothing waits for a rate). An operation this process does not know (its
    module is not loaded here) is left to a process that does."""
    try:
        declared = get_operation(name).limits
    except RegistrationError:
        return None
    waiting = _waiting().filter(operation=name).order_by("pending_at", "id")
    while True:
        with transaction.atomic():
            _lock(name)
            now = clock.now()
            room = Room(declared, now)
            # Keys not per value: every step counts against the same ones, so no more than their
            # room is read (a slot freed under 10,000 waiting reads one step, not a page).
            at_most = room.whole_operation(name)
            candidates = list(waiting[:BATCH if at_most is None else at_most])
            admitted, held = [], []
            for op in candidates:
                reason = room.take(op)
                (held if reason else admitted).append((op, reason))
            if at_most is not None:  # the rest wait, for the key that is full now
                rest = waiting.exclude(pk__in=[op.pk for op in candidates])
                reason = room.binding()
                held += [(op, reason) for op in rest.filter(flow_wait=FlowWait.QUEUED)[:BATCH]]
                # Told again only when what holds them back changed (the first of them says).
                told = list(rest.exclude(flow_wait=FlowWait.QUEUED).values_list("flow_wait", flat=True)[:1])
                if told and told[0] != reason:
                    rest.exclude(flow_wait__in=[reason, FlowWait.QUEUED]).update(flow_wait=reason)
            sent = _send([op for op, _ in admitted], now)
            _mark([(op, reason) for op, reason in held])
        if at_most is not None or len(candidates) < BATCH or not sent:
            return room.next_due(clock.now()) if held or at_most == 0 else None


class Room:
    """What each key of one operation has room for, counted once per key and drain."""

    def __init__(self, declared, now):
        self.declared, self.now = declared, now
        self.rate, self.slots = {}, {}

    def whole_operation(self, name) -> int | None:
        """When no key of the operation is per value: how many of its steps may go now (the
        least room of its keys); else None."""
        declared = self.declared
        if (declared.rate is not None and declared.rate_key is not None) or (
                declared.concurrency is not None and declared.concurrency_key is not None):
            return None
        free = []
        if declared.rate is not None:
            free.append(self._rate_left(f"rate:{name}"))
        if declared.concurrency is not None:
            free.append(self._slots_left(f"concurrency:{name}"))
        return max(0, min(free)) if free else None

    def binding(self) -> str:
        """Why the steps of an operation whose keys are not per value wait once it has no room:
        its rate, when its window is full; else its concurrency."""
        return FlowWait.RATE_LIMIT if any(left <= 0 for left in self.rate.values()) else FlowWait.CONCURRENCY

    def take(self, op) -> str:
        """"" and one taken of each of ``op``'s keys, or why it must wait (a ``FlowWait``)."""
        rated = bool(op.rate_key) and self.declared.rate is not None
        counted = bool(op.concurrency_key) and self.declared.concurrency is not None
        if rated and self._rate_left(op.rate_key) <= 0:
            return FlowWait.RATE_LIMIT
        if counted and self._slots_left(op.concurrency_key) <= 0:
            return FlowWait.CONCURRENCY
        if rated:
            self.rate[op.rate_key] -= 1
        if counted:
            self.slots[op.concurrency_key] -= 1
        return ""

    def _rate_left(self, key) -> int:
        if key not in self.rate:
            period = timedelta(seconds=self.declared.rate.seconds)
            RateSend.objects.filter(key=key, sent_at__lte=self.now - period).delete()
            self.rate[key] = self.declared.rate.count - RateSend.objects.filter(key=key).count()
        return self.rate[key]

    def _slots_left(self, key) -> int:
        if key not in self.slots:
            self.slots[key] = self.declared.concurrency - Operation.objects.filter(
                concurrency_key=key, state__in=OPERATION_HOLDING_SLOT).count()
        return self.slots[key]

    def next_due(self, now) -> float | None:
        """Seconds until the first of the full rate windows lets one more through."""
        full = [key for key, left in self.rate.items() if left <= 0]
        if not full:
            return None
        oldest = (RateSend.objects.filter(key__in=full).order_by("sent_at").values_list("sent_at", flat=True).first())
        if oldest is None:
            return 0.0
        due = oldest + timedelta(seconds=self.declared.rate.seconds)
        return max(0.0, (due - now).total_seconds())


def _send(operations, now) -> list:
    """Send ``operations``, each under its execution's lock (taken in the order of the ids) while
    its execution still takes new calls; record the sends their rate keys count. Returns those sent."""
    by_execution = defaultdict(list)
    for op in operations:
        by_execution[op.execution_id].append(op)
    sent = []
    for execution_id in sorted(by_execution, key=str):
        execution = progress.lock_execution(execution_id)
        if not policy.allows_new_calls(execution):
            continue  # it is stopping, or a failure is not handled yet: what stops it cancels these
        sent += progress.send_admitted([_holding(op, execution) for op in by_execution[execution_id]])
    if sent:
        Operation.objects.filter(pk__in=[op.pk for op in sent]).update(flow_wait="")
        # At each send's own time (its ``sending_at``, written after this drain counted): a window
        # of the stored sends then never holds more than the rate.
        RateSend.objects.bulk_create([RateSend(key=op.rate_key, sent_at=op.sending_at) for op in sent if op.rate_key])
    return sent


def _holding(op, execution):
    op.execution = execution
    return op


def _mark(held):
    """Those that wait, marked with why; a ``log`` event for each that waits for the first time
    or for another reason."""
    changed = defaultdict(list)
    for op, reason in held:
        if op.flow_wait != reason:
            changed[reason].append(op)
    events = []
    for reason, ops in changed.items():
        Operation.objects.filter(pk__in=[op.pk for op in ops]).update(flow_wait=reason)
        for op in ops:
            key = op.rate_key if reason == FlowWait.RATE_LIMIT else op.concurrency_key
            events.append(dict(execution_id=op.execution_id, type=EventType.LOG, operation=op.name,
                               message=f"waiting: {FlowWait(reason).label} ({key})",
                               data={"waiting_for": reason, "key": key}))
            op.flow_wait = reason
    if events:
        record_events(events)


def _lock(name):
    """Lock the row of operation ``name``'s decisions until the transaction ends (made if new)."""
    row = ROW_PREFIX + name
    if not ConcurrencyKey.objects.select_for_update().filter(key=row).exists():
        ConcurrencyKey.objects.bulk_create([ConcurrencyKey(key=row)], ignore_conflicts=True)
        ConcurrencyKey.objects.select_for_update().filter(key=row).exists()


# --- the managers' look ------------------------------------------------------------------

#: How often :func:`drain_waiting` forgets old sends, and when it last did.
FORGET_EVERY = timedelta(minutes=1)
_forgot_at = None


def next_deadline(after):
    """When the first rate window of an operation with waiting steps lets one more through (the
    test harness moves its clock there), or None."""
    found = []
    for name in _waiting_operations():
        try:
            rate = get_operation(name).limits.rate
        except RegistrationError:
            continue
        if rate is None:
            continue
        keys = _waiting().filter(operation=name).exclude(rate_key="").order_by().values("rate_key").distinct()
        oldest = RateSend.objects.filter(key__in=keys).order_by("sent_at").values_list("sent_at", flat=True).first()
        if oldest is not None:
            found.append(oldest + timedelta(seconds=rate.seconds))
    later = [at for at in found if at > after]
    return min(later, default=None)


def _waiting():
    """The steps handed to the gate that are still to be sent, of started executions: a paused
    one's wait for its unpause, which drains them, and must not take its operation's room meanwhile."""
    return (Operation.objects.filter(state__in=OPERATION_WAITING_TO_SEND, execution__status=ExecutionStatus.STARTED)
            .exclude(flow_wait=""))


def _waiting_operations() -> list[str]:
    """The operations that have steps waiting for a limit."""
    return list(_waiting().order_by().values_list("operation", flat=True).distinct())


def drain_waiting() -> float | None:
    """Drain every operation that has steps waiting (one query to find them); the seconds until
    a rate window lets one more through, if one waits for that. Once a minute, the sends older
    than the longest period are forgotten, whichever key they counted for (a drain forgets those
    of the keys it looks at)."""
    global _forgot_at
    now = clock.now()
    if _forgot_at is None or now - _forgot_at >= FORGET_EVERY:
        _forgot_at = now
        RateSend.objects.filter(sent_at__lt=now - timedelta(seconds=max(PERIODS.values()))).delete()
    dues = [due for due in (drain(name) for name in _waiting_operations()) if due is not None]
    return min(dues) if dues else None
