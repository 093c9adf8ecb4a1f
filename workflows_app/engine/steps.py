"""An execution's steps as rows: reading them and storing them (with the determinism guard).
Cancelling a step is ``engine.stopping``'s; resetting one for a resume ``engine.resuming``'s.

Every function here runs in the caller's transaction, under the execution's row lock; the
messages of the steps it sends go out once it commits.
"""

import functools
import json

from django.db import connection

from workflows_app import db, values
from workflows_app.conf import workflows_settings
from workflows_app.engine import graph as graphs
from workflows_app.engine import progress
from workflows_app.flow import gate
from workflows_app.errors import NonDeterministicWorkflow, ValueRefused
from workflows_app.models import Operation, OperationDependency
from workflows_app.registry import get_operation
from workflows_app.states import OperationState, StepKind


# --- reading ------------------------------------------------------------------------------

def load(pks) -> list:
    """The operations of ``pks``, as they are now, in no order: what a live run's pass reads
    again of the steps it left open (``Replay.catch_up``), every pass of an imperative
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
        if node.agent and node.kind != StepKind.WORKFLOW:  # none (or ""): a manager runs it
            values.check_agent_name(node.agent, f"step '{node.name}'")
            if _local(node):
                raise ValueError(f"step {node.name!r} is local: it runs in the manager's pass and names no agent "
                                 f"(agent={node.agent!r})")
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
            row.local = _local(node, definition)
            row.agent = node.agent or settings.MANAGEMENT_QUEUE
            row.max_retries = _first(node.options.get("max_retries"), definition.max_retries, settings.MAX_RETRIES)
            row.retry_interval = _first(node.options.get("retry_interval"), definition.retry_interval, settings.RETRY_INTERVAL)
            row.retry_backoff = definition.retry_backoff
            # A local step always has one: it holds its manager's pass while it runs.
            row.timeout = _first(node.options.get("timeout"), definition.timeout,
                                 settings.LOCAL_STEP_TIMEOUT if row.local else None)
            gate.stamp(row, definition)
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


def _local(node, definition=None) -> bool:
    """Whether ``node`` runs in the manager's pass: as the call says, else as its operation is declared."""
    if node.local is not None:
        return node.local
    return (definition or get_operation(node.operation)).local


def _first(*values):
    return next((v for v in values if v is not None), None)
