"""The one writer of execution statuses and operation states.

Every change goes through :func:`execution_transition` or :func:`operation_transition` (or
:func:`operations_transition`, the same for many operations at once); a new row is stored with
its first event by :func:`create_execution`, or already moved on from ``pending`` by
:func:`create_operation`:

* the move must be in the table of :mod:`workflows_app.states`, else ``InvalidTransition``;
* it is applied as a conditional UPDATE on the status (state and attempt) the caller read —
  compare-and-set — so of two racing writers exactly one wins and the other gets
  ``InvalidTransition`` (or ``StaleToken`` / ``StaleAttempt``) and writes nothing;
* its event is written in the same transaction: the caller's, when it has one (a refusal is
  raised before anything is written, so it needs no savepoint), else its own.

Nothing else assigns ``status`` or ``state``.

Once an execution's transition commits, what follows it runs: the engine's reactions, one
declared table (``engine.reactions.AFTER_EXECUTION_TRANSITION``: the deployment's next queued
execution starts, the parent is woken, lifecycle listeners, the ``execution_status_changed``
signal), which the app hands to :func:`react_with` when it is ready. The engine sits above this
module, so this module cannot name it; the table is passed down instead of imported.
"""

import functools
import json
from contextlib import nullcontext
from datetime import timedelta

from django.db import connection, transaction
from django.db.models import F

from workflows_app import clock, db
from workflows_app.conf import workflows_settings
from workflows_app.errors import InvalidTransition, StaleAttempt, StaleToken, TransitionRefused
from workflows_app.models import Event, Execution, Operation
from workflows_app.models.execution import hash_token, new_token
from workflows_app.states import (
    EXECUTION_CLAIMABLE,
    EXECUTION_TERMINAL,
    EXECUTION_TRANSITIONS,
    OPERATION_EVENT_BY_TARGET,
    OPERATION_HOLDING_SLOT,
    OPERATION_STATE_TIMESTAMP,
    OPERATION_TRANSITIONS,
    EventType,
    ExecutionStatus,
    OperationState,
    execution_event_type,
)

#: ``react(execution, source, target, event)``, called once an execution transition commits
#: (:func:`react_with`); until the app is ready, nothing follows a transition.
_react = None


def react_with(react):
    """Call ``react(execution, source, target, event)`` after every committed execution transition."""
    global _react
    _react = react


#: ``freed(operation)``, called when an operation leaves ``sending``/``sent``/``started`` (an
#: attempt that ends frees a slot of its operation's concurrency): ``workflows_app.flow.gate``,
#: handed down by the app (:func:`free_slots_with`), which defers what it does to the commit.
_slot_freed = None


def free_slots_with(freed):
    """Call ``freed(operation)`` in the transaction of every move out of an attempt's slot."""
    global _slot_freed
    _slot_freed = freed


def _left_slot(operation, source, target):
    if _slot_freed is not None and source in OPERATION_HOLDING_SLOT and target not in OPERATION_HOLDING_SLOT:
        _slot_freed(operation)


def _atomic():
    """The transaction the writes of one transition share: the caller's if it is in one (no
    savepoint: the hot path runs several transitions per transaction), else their own."""
    return nullcontext() if connection.in_atomic_block else transaction.atomic()


def create_execution(execution, event) -> Execution:
    """Store a new ``execution`` (an unsaved instance, in the status it was built with) and its
    first ``event`` together: both or neither. ``event.execution`` is set to it.

    On PostgreSQL this is one statement (:func:`_insert_with_event`), which outside a transaction
    commits by itself: one round trip where ``BEGIN``, two INSERTs and ``COMMIT`` took four, on
    the path of every start. Inside a transaction it is part of it."""
    event.execution = execution
    return _insert_with_event(execution, event)


def create_operation(operation, target, *, through=(), data=None, **fields) -> Operation:
    """Store a new ``operation`` (an unsaved instance, ``pending``) already moved on to
    ``target`` — through the states ``through`` first, each move with its event, as
    :func:`operation_transition` from ``pending`` right after the INSERT would write them — in one
    statement on PostgreSQL: a step that may start as it is stored (every step of an imperative
    workflow) goes in ``sending``; a local step its own pass runs goes to ``started``. ``data``:
    the last event's; ``fields``: other columns of the row."""
    source = OperationState(operation.state)
    path = [OperationState(state) for state in (*through, target)]
    if source != OperationState.PENDING:
        raise InvalidTransition("operation", operation.pk, source, path[0], source)
    events, now, attempt = [], clock.now(), operation.attempt
    for before, after in zip([source, *path], path):
        if after not in OPERATION_TRANSITIONS[before]:
            raise InvalidTransition("operation", operation.pk, before, after, source)
        if after == OperationState.SENDING:
            attempt += 1
            operation.granted_until = grant_deadline(now)
        events.append(_operation_event(operation, before, after, attempt, "", data if after == path[-1] else None))
        setattr(operation, OPERATION_STATE_TIMESTAMP[after], now)
    operation.state, operation.attempt = path[-1], attempt
    for name, value in fields.items():
        setattr(operation, name, value)
    return _insert_with_events(operation, events)


def create_kept_operations(operations, *, message, data=None) -> list:
    """Store the new ``operations`` (unsaved instances: the steps a rerun keeps,
    ``engine.reruns``) already ``succeeded`` at attempt 0 with the results they carry, each with
    its ``operation_succeeded`` event: they are created ended, and never run."""
    now = clock.now()
    events = []
    for operation in operations:
        operation.state, operation.attempt = OperationState.SUCCEEDED, 0
        setattr(operation, OPERATION_STATE_TIMESTAMP[OperationState.SUCCEEDED], now)
        events.append(_operation_event(operation, OperationState.PENDING, OperationState.SUCCEEDED, 0, message, data))
    with _atomic():
        Operation.objects.bulk_create(operations)
        Event.objects.bulk_create(events)
    return operations


def _insert_with_event(instance, event):
    return _insert_with_events(instance, [event])


def _insert_with_events(instance, events):
    """Save the new ``instance`` and its ``events`` together. On PostgreSQL one statement (the
    events' INSERT reads a data-modifying CTE, so they are written only with the row; the ids are
    made in Python). Elsewhere, or when a field's value is left to the database (a
    ``db_default`` without a Python default), all are saved by the ORM in the caller's
    transaction or one of their own."""
    model = type(instance)
    values = [field.get_db_prep_save(field.pre_save(instance, True), connection) for field in model._meta.concrete_fields]
    if connection.vendor != "postgresql" or any(hasattr(value, "as_sql") for value in values):
        with _atomic():
            instance.save(force_insert=True)
            for event in events:
                event.save(force_insert=True)
        return instance
    for event in events:
        values += [field.get_db_prep_save(field.pre_save(event, True) if field.name == "timestamp"
                                          else getattr(event, field.attname), connection)
                   for field in map(Event._meta.get_field, EVENT_COLUMNS)]
    with db.cursor() as cursor:
        cursor.execute(_insert_with_events_sql(model, len(events)), values)
        for event, (pk,) in zip(events, cursor.fetchall()):
            event.pk = pk
    for saved in (instance, *events):
        saved._state.adding, saved._state.db = False, connection.alias
    return instance


@functools.cache
def _insert_with_events_sql(model, count):
    """The statement of :func:`_insert_with_events`, built once per process, model and number of
    events: every concrete column of the row, then each event's ``EVENT_COLUMNS``, in order."""
    q = connection.ops.quote_name
    meta, event_meta = model._meta, Event._meta
    columns = ", ".join(q(field.column) for field in meta.concrete_fields)
    event_columns = ", ".join(q(event_meta.get_field(name).column) for name in EVENT_COLUMNS)
    placeholders = ", ".join(["%s"] * len(meta.concrete_fields))
    one = f"SELECT {', '.join(['%s'] * len(EVENT_COLUMNS))} FROM new"
    return (f"WITH new AS (INSERT INTO {q(meta.db_table)} ({columns}) VALUES ({placeholders}) "
            f"RETURNING {q(meta.pk.column)}) "
            f"INSERT INTO {q(event_meta.db_table)} ({event_columns}) {' UNION ALL '.join([one] * count)} "
            f"RETURNING {q(event_meta.pk.column)}")


def record_event(execution_id, type, message="", data=None, operation=None) -> Event:
    """Append an event that records no state change (``log``, ``stale_report``, …)."""
    return Event.objects.create(
        execution_id=execution_id, type=EventType(type), message=message, data=data or {}, operation=operation
    )


def record_events(events) -> list:
    """:func:`record_event` for many at once (one INSERT): ``events``, the same arguments as dicts."""
    return Event.objects.bulk_create([
        Event(execution_id=e["execution_id"], type=EventType(e["type"]), message=e.get("message", ""),
              data=e.get("data") or {}, operation=e.get("operation")) for e in events])


def execution_transition(execution, target, *, message="", data=None, token=None, fence=None, renew_token=False,
                         **fields) -> Execution:
    """Move ``execution`` from the status it was read in to ``target``, with its event.

    ``token``: apply only while this is the execution's current token; ``fence``: the same, given
    as the token's stored hash (what a dispatcher read when it took the execution).
    ``renew_token``: issue a new token; the returned execution carries it as ``issued_token``
    (the only time it exists in clear). ``fields``: other columns written in the same UPDATE.
    Returns ``execution`` updated in place. Raises ``InvalidTransition`` or ``StaleToken``.
    """
    source = ExecutionStatus(execution.status)
    target = ExecutionStatus(target)
    if target not in EXECUTION_TRANSITIONS[source]:
        raise InvalidTransition("execution", execution.pk, source, target, source)

    now = clock.now()
    updates = {"status": target, **fields}
    if target == ExecutionStatus.STARTED and execution.started_at is None:
        updates.setdefault("started_at", now)
    if target in EXECUTION_TERMINAL:
        updates.setdefault("ended_at", now)
    elif source in EXECUTION_TERMINAL:
        updates.setdefault("ended_at", None)  # resumed: running again
    issued = None
    if renew_token:
        issued = new_token()
        updates["token_hash"] = hash_token(issued)

    expected_hash = hash_token(token) if token is not None else fence
    event = Event(execution_id=execution.pk, type=execution_event_type(source, target),
                  message=message or f"{source} -> {target}",
                  data={"from": source.value, "to": target.value, **(data or {})})
    conditions = {"pk": execution.pk, "status": source}
    if expected_hash is not None:
        conditions["token_hash"] = expected_hash
    if connection.vendor == "postgresql":
        changed = _update_with_event(Execution, conditions, updates, event)  # one statement
    else:
        with _atomic():
            changed = Execution.objects.filter(**conditions).update(**updates)
            if changed == 1:
                event.save()
    if changed != 1:
        _refuse_execution(execution, source, target, expected_hash)
    for name, value in updates.items():
        setattr(execution, name, value)
    execution.issued_token = issued
    if _react is not None:
        transaction.on_commit(lambda react=_react: react(execution, source, target, event))
    return execution


def _refuse_execution(execution, source, target, expected_hash):
    current = Execution.objects.filter(pk=execution.pk).values_list("status", "token_hash").first()
    if current is None:
        raise Execution.DoesNotExist(f"execution {execution.pk} does not exist")
    status, token_hash = current
    if expected_hash is not None and token_hash != expected_hash:
        raise StaleToken(execution.pk)
    raise InvalidTransition("execution", execution.pk, source, target, ExecutionStatus(status))


def operation_transition(operation, target, *, attempt=None, message="", data=None, share_lock_execution=False,
                         **fields) -> Operation:
    """Move ``operation`` from the state (and attempt) it was read in to ``target``, with its event.

    ``attempt``: the attempt the caller reports for; refused with ``StaleAttempt`` unless it is
    the operation's current one. Entering ``sending`` starts a new attempt (``attempt + 1``).
    ``share_lock_execution`` (in the caller's transaction): first lock the execution's row
    ``FOR SHARE`` — in the same statement on PostgreSQL — and leave its ``id``, ``status`` and
    ``failure_mode``, as they are once locked, in ``operation.execution``.
    ``fields``: other columns written in the same UPDATE. Returns ``operation`` updated in place.
    """
    source = OperationState(operation.state)
    target = OperationState(target)
    if attempt is not None and attempt != operation.attempt:
        raise StaleAttempt(operation.pk, attempt, operation.attempt)
    if target not in OPERATION_TRANSITIONS[source]:
        raise InvalidTransition("operation", operation.pk, source, target, source)

    updates = {"state": target, OPERATION_STATE_TIMESTAMP[target]: clock.now(), **fields}
    if target == OperationState.SENDING:
        updates["attempt"] = operation.attempt + 1
        updates["granted_until"] = grant_deadline(updates[OPERATION_STATE_TIMESTAMP[target]])

    event = _operation_event(operation, source, target, updates.get("attempt", operation.attempt), message, data)
    if connection.vendor == "postgresql":
        changed = _update_operation_with_event(operation, source, updates, event, share_lock_execution)  # one statement
    else:
        with _atomic():
            if share_lock_execution:  # SQLite: the transaction already holds the only write lock
                operation.execution = Execution.objects.only(*LOCKED_EXECUTION_FIELDS).get(pk=operation.execution_id)
            changed = Operation.objects.filter(pk=operation.pk, state=source, attempt=operation.attempt).update(**updates)
            if changed == 1:
                event.save()
    if changed != 1:
        _refuse_operation(operation, source, target)
    for name, value in updates.items():
        setattr(operation, name, value)
    _left_slot(operation, source, target)
    return operation


#: What a completion reads of the execution it locks (the payload, which may be large, is not;
#: the workflow id names the messages it sends, in Flower, the priority places them, and the
#: trace context goes in their headers: workflows_app.broker.LABEL_FIELDS).
LOCKED_EXECUTION_FIELDS = ("id", "status", "failure_mode", "workflow_id", "priority", "trace_context")
#: The columns an event statement of this module writes, in its order.
EVENT_COLUMNS = ("execution", "operation", "type", "message", "data", "timestamp")


def _update_operation_with_event(operation, source, updates, event, share_lock_execution=False) -> int:
    """PostgreSQL: the compare-and-set UPDATE of ``operation`` and the INSERT of its event as one
    statement (:func:`_update_with_event`). Returns the number of rows moved (0 or 1).

    With ``share_lock_execution`` the execution's row is locked first, in the same statement: the
    UPDATE joins it, so the lock is taken before the operation's row is (the order of every
    writer of both, so no deadlock), and the execution's columns are read as locked (a locking
    read sees the latest committed row). A statement that follows sees what a writer of the
    execution committed while this one waited for the lock."""
    conditions = {"pk": operation.pk, "state": source, "attempt": operation.attempt}
    if not share_lock_execution:
        return _update_with_event(Operation, conditions, updates, event)
    sql = _update_with_event_sql(Operation, tuple(updates), tuple(conditions), share_lock_execution=True)
    params = [Execution._meta.pk.get_db_prep_value(operation.execution_id, connection),
              *_update_with_event_params(Operation, conditions, updates, event)]
    rows = db.fetch(Execution, sql, params, names=LOCKED_EXECUTION_FIELDS, extra=("event_pk",))
    if not rows:
        return 0  # no such execution: nothing moved
    operation.execution = rows[0]
    if rows[0].event_pk is None:
        return 0
    event.pk = rows[0].event_pk
    return 1


def _update_with_event(model, conditions, updates, event) -> int:
    """PostgreSQL: the compare-and-set UPDATE of the row of ``model`` that matches every one of
    ``conditions`` (field name -> value) and the INSERT of its event as one statement (the event
    is inserted only if the row moved): one round trip instead of two, on the path every
    operation takes several times and every execution at its start and its end. Returns the
    number of rows moved (0 or 1)."""
    sql = _update_with_event_sql(model, tuple(updates), tuple(conditions))
    with db.cursor() as cursor:
        cursor.execute(sql, _update_with_event_params(model, conditions, updates, event))
        row = cursor.fetchone()
    if row is None:
        return 0
    event.pk = row[0]
    return 1


def _update_with_event_params(model, conditions, updates, event):
    meta = model._meta
    params = [meta.get_field(name).get_db_prep_save(value, connection) for name, value in updates.items()]
    params += [(meta.pk if name == "pk" else meta.get_field(name)).get_db_prep_value(value, connection)
               for name, value in conditions.items()]
    event.timestamp = clock.now()
    params += [field.get_db_prep_save(event.timestamp if field.name == "timestamp" else getattr(event, field.attname), connection)
               for field in map(Event._meta.get_field, EVENT_COLUMNS)]
    return params


@functools.cache
def _update_with_event_sql(model, names, conditions, share_lock_execution=False):
    """The statement of :func:`_update_with_event` that sets the fields ``names`` where the
    fields ``conditions`` are equal to their values, built once per process (per model and sets
    of fields); with ``share_lock_execution`` (operations), the one that locks the execution
    first (:func:`_update_operation_with_event`)."""
    q = connection.ops.quote_name
    meta, event_meta, ex_meta = model._meta, Event._meta, Execution._meta
    assignments = ", ".join(f"{q(meta.get_field(name).column)} = %s" for name in names)
    table = q(meta.db_table)
    pk = f"{table}.{q(meta.pk.column)}"
    where = " AND ".join(f"{table}.{q((meta.pk if name == 'pk' else meta.get_field(name)).column)} = %s"
                         for name in conditions)
    insert = (f"INSERT INTO {q(event_meta.db_table)} ({', '.join(q(event_meta.get_field(name).column) for name in EVENT_COLUMNS)}) "
              f"SELECT {', '.join(['%s'] * len(EVENT_COLUMNS))} FROM moved RETURNING {q(event_meta.pk.column)}")
    if not share_lock_execution:
        return f"WITH moved AS (UPDATE {table} SET {assignments} WHERE {where} RETURNING {pk}) {insert}"
    locked = ", ".join(q(ex_meta.get_field(name).column) for name in LOCKED_EXECUTION_FIELDS)
    return (f"WITH ex AS (SELECT {locked} FROM {q(ex_meta.db_table)} WHERE {q(ex_meta.pk.column)} = %s FOR SHARE), "
            f"moved AS (UPDATE {table} SET {assignments} FROM ex WHERE {where} RETURNING {pk}), "
            f"ev AS ({insert}) "
            f"SELECT {locked}, (SELECT {q(event_meta.pk.column)} FROM ev) FROM ex")


def grant_deadline(sent_at):
    """Until when an attempt sent at ``sent_at`` may start on its agent unasked (GRANT_SECONDS)."""
    return sent_at + timedelta(seconds=workflows_settings.GRANT_SECONDS)


def claim_operation(operation_id, attempt, *, data=None, incarnation=""):
    """PostgreSQL: an agent's claim of an attempt in one statement — ``sent`` (or ``sending``:
    the message overtook its sender's write of ``sent``) -> ``started``, only while the attempt
    is current and its execution is ``started`` (or ``paused``: it was sent before the pause), with
    its event (and the ``sent`` one it skipped).
    Returns the operation, loaded by that statement, with ``dry_run`` (its execution's
    ``is_dry_run``); ``None`` when it did not move (or on another database): the caller then
    loads the operation and finds out why (``agents.runner``)."""
    if connection.vendor != "postgresql":
        return None
    sent, started = OperationState.SENT, OperationState.STARTED
    now = clock.now()
    sent_event = {"from": OperationState.SENDING.value, "to": sent.value, "attempt": attempt}
    started_event = {"from": sent.value, "to": started.value, "attempt": attempt, **(data or {})}
    params = [
        Operation._meta.pk.get_db_prep_value(operation_id, connection), attempt, OperationState.SENDING.value, sent.value,
        *EXECUTION_CLAIMABLE,
        started.value, now, incarnation, OperationState.SENDING.value, now,
        now,
        OPERATION_EVENT_BY_TARGET[sent].value, f"{OperationState.SENDING} -> {sent}", json.dumps(sent_event),
        OPERATION_EVENT_BY_TARGET[started].value, f"{sent} -> {started}", json.dumps(started_event),
        OperationState.SENDING.value,
    ]
    moved = db.fetch(Operation, _claim_sql(), params, extra=("was", "dry_run"))
    return moved[0] if moved else None


@functools.cache
def _claim_sql():
    """The claim's statement (PostgreSQL), built once per process: it is on every operation's path."""
    assert OperationState.STARTED in OPERATION_TRANSITIONS[OperationState.SENT]
    assert OperationState.SENT in OPERATION_TRANSITIONS[OperationState.SENDING]
    q = connection.ops.quote_name
    op_meta, ex_meta, event_meta = Operation._meta, Execution._meta, Event._meta

    def column(meta, name):
        return q(meta.get_field(name).column)

    table, pk, state = q(op_meta.db_table), column(op_meta, "id"), column(op_meta, "state")
    event_columns = ", ".join(column(event_meta, name) for name in EVENT_COLUMNS)
    return (
        f"WITH old AS (SELECT o.{pk}, o.{state} AS was, e.{column(ex_meta, 'is_dry_run')} AS dry_run "
        f"FROM {table} o JOIN {q(ex_meta.db_table)} e ON e.{column(ex_meta, 'id')} = o.{column(op_meta, 'execution')} "
        f"WHERE o.{pk} = %s AND o.{column(op_meta, 'attempt')} = %s AND o.{state} IN (%s, %s) "
        f"AND e.{column(ex_meta, 'status')} IN ({', '.join(['%s'] * len(EXECUTION_CLAIMABLE))}) FOR UPDATE OF o), "
        f"moved AS (UPDATE {table} SET {state} = %s, {column(op_meta, 'started_at')} = %s, "
        f"{column(op_meta, 'incarnation')} = %s, {column(op_meta, 'sent_at')} = "
        f"CASE WHEN old.was = %s THEN %s ELSE {table}.{column(op_meta, 'sent_at')} END "
        f"FROM old WHERE {table}.{pk} = old.{pk} RETURNING {db.columns(Operation, table)}, old.was, old.dry_run), "
        f"events AS (INSERT INTO {q(event_meta.db_table)} ({event_columns}) "
        f"SELECT moved.{column(op_meta, 'execution')}, moved.{column(op_meta, 'name')}, e.type, e.message, e.data::jsonb, %s "
        f"FROM moved, (VALUES (1, %s, %s, %s), (2, %s, %s, %s)) AS e(k, type, message, data) "
        f"WHERE e.k = 2 OR moved.was = %s ORDER BY e.k) "
        f"SELECT * FROM moved"
    )


def operations_transition(operations, target, *, message="", data=None) -> list:
    """Move many operations to ``target`` at once, each from the state (and attempt) it was read
    in, with one event each: the same rules as :func:`operation_transition` in three statements
    (lock the rows, update them, insert the events) instead of two per operation.

    Those no longer in the state or attempt they were read in (another writer won) are left out,
    unchanged; returns the operations that moved, updated in place.
    """
    operations = list(operations)
    target = OperationState(target)
    for operation in operations:
        source = OperationState(operation.state)
        if target not in OPERATION_TRANSITIONS[source]:
            raise InvalidTransition("operation", operation.pk, source, target, source)
    if len(operations) == 1:
        try:
            return [operation_transition(operations[0], target, message=message, data=data)]
        except TransitionRefused:
            return []
    if not operations:
        return []

    now = clock.now()
    with _atomic():
        # Lock only the rows still in a state they may move from: a row another writer moved on
        # is not waited for nor held (an agent recording its result may need it).
        current = {pk: (state, attempt) for pk, state, attempt in
                   _locked(operations).filter(state__in={op.state for op in operations})
                   .values_list("pk", "state", "attempt")}
        moving = [op for op in operations if current.get(op.pk) == (op.state, op.attempt)]
        if not moving:
            return []
        updates = {"state": target, OPERATION_STATE_TIMESTAMP[target]: now}
        if target == OperationState.SENDING:
            updates["attempt"] = F("attempt") + 1
            updates["granted_until"] = grant_deadline(now)
        Operation.objects.filter(pk__in=[op.pk for op in moving]).update(**updates)
        events = []
        for operation in moving:
            source = OperationState(operation.state)
            attempt = operation.attempt + 1 if target == OperationState.SENDING else operation.attempt
            events.append(_operation_event(operation, source, target, attempt, message, data))
            operation.state, operation.attempt = target, attempt
            setattr(operation, OPERATION_STATE_TIMESTAMP[target], now)
            if target == OperationState.SENDING:
                operation.granted_until = updates["granted_until"]
            _left_slot(operation, source, target)
        Event.objects.bulk_create(events)
    return moving


def lock_operations(operations):
    """Lock the rows of ``operations`` in the caller's transaction before moving them one by one
    (:func:`operation_transition` locks each as it moves it): a writer that moves several
    operations in one transaction takes them all at once, in the one order. No-op outside a
    transaction (each move is then a transaction of its own) and on SQLite (one lock for all)."""
    operations = list(operations)
    if len(operations) > 1 and connection.vendor != "sqlite" and transaction.get_connection().in_atomic_block:
        list(_locked(operations).values_list("pk", flat=True))


def _locked(operations):
    """The rows of ``operations``, to be locked in the order every writer of several takes them —
    the managers' intake's (execution, then operation): two writers that lock some of the same
    rows in different orders can each wait for the other (PostgreSQL ends one of them with
    "deadlock detected")."""
    return (Operation.objects.select_for_update(no_key=True).filter(pk__in=[op.pk for op in operations])
            .order_by("execution_id", "pk"))


def _operation_event(operation, source, target, attempt, message, data):
    return Event(
        execution_id=operation.execution_id,
        operation=operation.name,
        type=OPERATION_EVENT_BY_TARGET[target],
        message=message or f"{source} -> {target}",
        data={"from": source.value, "to": target.value, "attempt": attempt, **(data or {})},
    )


def _refuse_operation(operation, source, target):
    current = Operation.objects.filter(pk=operation.pk).values_list("state", "attempt").first()
    if current is None:
        raise Operation.DoesNotExist(f"operation {operation.pk} does not exist")
    state, attempt = current
    if attempt != operation.attempt:
        raise StaleAttempt(operation.pk, operation.attempt, attempt)
    raise InvalidTransition("operation", operation.pk, source, target, OperationState(state))
