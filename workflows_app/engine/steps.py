"""An execution's steps as rows: storing them (with the determinism guard), cancelling them — the
one way a step is cancelled, whoever asks: ``ctx.cancel_step``, a failure mode, a stop, the end of
the execution — stopping the processes of attempts, and resume's reset.

Every function here runs in the caller's transaction, under the execution's row lock; messages
(sends, revokes, kills) go out once it commits.
"""

import functools
import json

from django.db import connection, transaction
from django.db.models import Count, OuterRef, Subquery
from django.db.models.functions import Coalesce

from workflows_app import db, dispatch, values
from workflows_app.conf import workflows_settings
from workflows_app.engine import graph as graphs
from workflows_app.engine import progress
from workflows_app.errors import NonDeterministicWorkflow, TransitionRefused, ValueRefused, WorkflowError
from workflows_app.models import Operation, OperationDependency
from workflows_app.models.operation import task_id_for
from workflows_app.registry import get_operation
from workflows_app.states import OperationState, StepKind
from workflows_app.transitions import operation_transition

#: How often a cancel reads a step again that an agent moved on meanwhile (sent -> started).
CANCEL_TRIES = 3


# --- reading ------------------------------------------------------------------------------

def load(pks) -> list:
    """The operations of ``pks``, as they are now, in no order: what a live run's pass reads
    again of the steps it left open (``WorkflowContext._catch_up``), every pass of an imperative
    workflow. On PostgreSQL a statement prepared once per connection (``db.fetch``): the ORM's
    query built anew cost more than running it."""
    if connection.vendor != "postgresql":
        return list(Operation.objects.filter(pk__in=pks).order_by())
    pk = Operation._meta.pk
    return db.fetch(Operation, _load_sql(), [[pk.get_db_prep_value(value, connection) for value in pks]])


@functools.cache
def _load_sql():
    """:func:`load`'s statement, built once per process."""
    meta = Operation._meta
    return (f"SELECT {db.columns(Operation)} FROM {connection.ops.quote_name(meta.db_table)} "
            f"WHERE {connection.ops.quote_name(meta.pk.column)} = ANY(%s)")


# --- storing ------------------------------------------------------------------------------

def store(execution, known, nodes, *, awaited, failed=None, after=()):
    """Store those of ``nodes`` (``graph.NodeSpec``) that ``known`` (name -> stored operation,
    updated in place) does not hold yet — a graph whole, before anything of it is sent — then
    send those whose dependencies have all succeeded (``failed``: as for
    ``policy.allows_new_calls``). Returns the new rows.

    ``after``: the steps the workflow code awaited last, stored as the ``after`` of each new node
    that depends on no other new node (those that do follow them through it) and not as one of its
    dependencies: an order to draw, in the same INSERT, that nothing waits on.

    A node whose name is stored already must ask for the same operation and arguments: a replay
    that asks for another call under a stored name raises ``NonDeterministicWorkflow`` rather
    than return the stored result of a different call."""
    new = []
    for node in nodes:
        stored = known.get(node.name)
        if stored is None:
            new.append(node)
        else:
            check_same_call(stored, node)
    if not new:
        return []
    graphs.validate(new, known=known.keys())
    for node in new:  # what workflow code asks to store: a refusal raises in that code
        problem = values.string_problem(node.name)
        if problem:
            raise ValueRefused("a step name", problem)
        values.check(list(node.args), f"step '{node.name}' args")
        values.check(node.kwargs, f"step '{node.name}' kwargs")
    settings = workflows_settings
    inside = {node.name for node in new}
    rows = []
    for node in new:
        unfinished = sum(1 for dep in node.depends_on
                         if dep not in known or known[dep].state != OperationState.SUCCEEDED)
        row = Operation(execution=execution, name=node.name, kind=node.kind, operation=node.operation,
                        args=list(node.args), kwargs=dict(node.kwargs), awaited=awaited,
                        input=node.input.to_json() if node.input is not None else None,
                        pending_dependencies=unfinished,
                        after=[] if inside.intersection(node.depends_on) else [a for a in after if a not in node.depends_on])
        if node.kind == StepKind.WORKFLOW:
            # Run by no agent and never retried: its child has steps (and retries) of its own.
            row.agent, row.max_retries = "", 0
        else:
            definition = get_operation(node.operation)
            row.agent = node.agent or settings.MANAGEMENT_QUEUE
            row.max_retries = _first(node.options.get("max_retries"), definition.max_retries, settings.MAX_RETRIES)
            row.retry_interval = _first(node.options.get("retry_interval"), definition.retry_interval, settings.RETRY_INTERVAL)
            row.retry_backoff = definition.retry_backoff
            row.timeout = _first(node.options.get("timeout"), definition.timeout, None)
        rows.append(row)
    progress.store(execution, rows, failed)
    known.update((row.name, row) for row in rows)
    # The dependencies after the sends: no message goes out before this transaction commits, and
    # a completion counts its dependents down only under the execution's lock, which it holds.
    OperationDependency.objects.bulk_create([
        OperationDependency(operation=known[node.name], depends_on=known[dep])
        for node in new for dep in node.depends_on
    ])
    return rows


def check_same_call(stored, node):
    """``NonDeterministicWorkflow`` unless ``node`` asks for the call stored as ``stored``: the
    same operation, and the same arguments once stored as JSON (a tuple is stored as a list)."""
    requested = {"operation": node.operation, "args": _as_stored(list(node.args)), "kwargs": _as_stored(dict(node.kwargs))}
    if requested != {"operation": stored.operation, "args": stored.args, "kwargs": stored.kwargs}:
        raise NonDeterministicWorkflow(
            node.name, {"operation": stored.operation, "args": stored.args, "kwargs": stored.kwargs},
            {"operation": node.operation, "args": list(node.args), "kwargs": dict(node.kwargs)})


def _as_stored(value):
    """``value`` as the JSON column gives it back."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        return value  # not storable: it differs from whatever was stored


def _first(*values):
    return next((v for v in values if v is not None), None)


# --- cancelling ---------------------------------------------------------------------------

def cancelled_error(message, cause=None):
    """The error a step cancelled by the engine keeps; ``cause``: the step whose failure (or
    cancel) it follows from, which the workflow code then sees as ``StepFailed.cause``."""
    error = {"type": "Cancelled", "message": message, "traceback": ""}
    if cause is not None:
        error["cause"] = cause
    return error


def cancel(execution, operations, message, *, error=None, stop_processes=True, dependents=False, known=None):
    """Cancel first, terminate after, for each of ``operations`` not terminal yet:
    ``cancelled`` with its event and ``error`` (default: :func:`cancelled_error`). The message of
    one not started is revoked (fencing refuses it anyway); one that was running is asked to
    stop — SIGTERM to its process group on every agent, SIGKILL after KILL_GRACE_SECONDS — once
    this commits (the child execution of a step is stopped first: ``stopping.stop_child``),
    unless ``stop_processes`` is false (force-cancel: what it reports later is kept
    as a ``stale_report`` event). With ``dependents``, the steps that wait for a cancelled one
    (directly or not) can never start and are cancelled too (``known``: as for
    :func:`cancel_dependents`). Returns those it cancelled."""
    # A real cycle, the tree's: a step's child is stopped first, and stopping it cancels its steps here.
    from workflows_app.engine import stopping

    error = error or cancelled_error(message)
    running, unsent, cancelled = [], [], []
    for operation in operations:
        if operation.kind == StepKind.WORKFLOW and not operation.is_terminal:
            stopping.stop_child(execution, operation)  # a reset step (resume) may have a running child
        was = _cancel_one(operation, message, error)
        if was is None:
            continue  # it ended meanwhile: its own terminal event stands
        cancelled.append(operation)
        if was == OperationState.STARTED and operation.kind == StepKind.OPERATION:
            running.append(operation)
        elif was in (OperationState.SENDING, OperationState.SENT):
            unsent.append(operation)
    if unsent:
        task_ids = [op.task_id for op in unsent]
        transaction.on_commit(lambda: dispatch.revoke(task_ids))
    if running:
        ask_to_stop([(op.pk, op.attempt) for op in running])
    if running and stop_processes:
        stop_attempts(execution.pk, [(op.pk, op.attempt) for op in running])
    if dependents and cancelled:
        cancel_dependents(execution, cancelled, known)
    return cancelled


def cancel_in_states(execution, states, message, **options):
    """:func:`cancel` for every operation of the execution in one of ``states``."""
    return cancel(execution, Operation.objects.filter(execution_id=execution.pk, state__in=states), message, **options)


def _cancel_one(operation, message, error):
    """The state it was cancelled from, or None when it had ended. An agent may move it on while
    we look (sent -> started): then it is read again and cancelled from its new state."""
    for _ in range(CANCEL_TRIES):
        if operation.is_terminal:
            return None
        was = OperationState(operation.state)
        try:
            operation_transition(operation, OperationState.CANCELLED, message=message, error=error)
            return was
        except TransitionRefused:
            operation.refresh_from_db(fields=["state", "attempt"])
    raise WorkflowError(f"step {operation.name!r} kept changing state; not cancelled")


def cancel_dependents(execution, roots, known=None):
    """Every pending step that waits, directly or not, for one of ``roots`` (steps that failed
    or were cancelled) can never start: ``cancelled``, naming its root as the cause. ``known``:
    the rows a replay holds (name -> operation), updated in place, so that it sees the cancels."""
    held = {op.pk: op for op in (known or {}).values()}
    cause = {op.pk: op for op in roots}
    while cause:
        edges = (OperationDependency.objects.filter(depends_on_id__in=cause, operation__state=OperationState.PENDING)
                 .values_list("operation_id", "depends_on_id"))
        root_of = {pk: cause[dep] for pk, dep in edges}
        following = {}
        missing = [pk for pk in root_of if pk not in held]
        loaded = list(Operation.objects.filter(pk__in=missing)) if missing else []
        for dependent in [held[pk] for pk in root_of if pk in held] + loaded:
            root = root_of[dependent.pk]
            why = "failed" if root.state == OperationState.FAILED else "was cancelled"
            message = f"not started: {root.name} {why}"
            if cancel(execution, [dependent], message, error=cancelled_error(message, root.name)):
                following[dependent.pk] = root
        cause = following


def ask_to_stop(attempts):
    """Once this commits: ``ctx.is_cancelled()`` becomes true in the processes running
    ``attempts`` (pairs of operation id and attempt), on whichever agent runs them."""
    attempts = list(attempts)
    if attempts:
        transaction.on_commit(lambda: dispatch.broadcast_cancel(attempts))


def stop_attempts(execution_id, attempts, *, dispatcher=False):
    """Once this commits: SIGTERM the process groups running ``attempts`` (and the execution's
    dispatcher), SIGKILL after KILL_GRACE_SECONDS, and revoke their Celery tasks."""
    attempts = list(attempts)

    def stop():
        dispatch.broadcast_kill(execution_id, attempts, dispatcher=dispatcher)
        dispatch.revoke([task_id_for(pk, attempt) for pk, attempt in attempts], terminate=True)

    transaction.on_commit(stop)


# --- resume -------------------------------------------------------------------------------

def reset(execution, states, message):
    """Resume's reset: the execution's operations in ``states`` go back to ``pending``
    with ``current_retries = 0`` (a handled failure is forgotten with its failure); the
    dependencies still to succeed are counted again; every pending operation whose dependencies
    have all succeeded is sent. Whatever process of a reset attempt may still run is stopped
    once this commits (its attempt is over: a report from it is stale), so a step never runs
    twice at once."""
    superseded = []
    for operation in Operation.objects.filter(execution_id=execution.pk, state__in=states):
        if operation.started_at is not None and operation.kind == StepKind.OPERATION:
            superseded.append((operation.pk, operation.attempt))
        operation_transition(operation, OperationState.PENDING, message=message, current_retries=0,
                             next_attempt_at=None, error=None, result=None, failure_handled=False)
    unfinished = (OperationDependency.objects.filter(operation_id=OuterRef("pk"))
                  .exclude(depends_on__state=OperationState.SUCCEEDED)
                  .order_by().values("operation_id").annotate(n=Count("pk")).values("n"))
    pending = Operation.objects.filter(execution_id=execution.pk, state=OperationState.PENDING)
    pending.update(pending_dependencies=Coalesce(Subquery(unfinished), 0))
    progress.send_ready(execution, list(pending.filter(pending_dependencies=0)))
    if superseded:
        stop_attempts(execution.pk, superseded)
