"""What the entry points show of executions: the read-only queries the API, the admin and the
commands share, each a constant number of queries however many operations there are."""

import uuid

from django.db.models import Count

from workflows_app import registry
from workflows_app.models import Execution, Operation, OperationDependency
from workflows_app.signals import execution_warnings
from workflows_app.states import OperationState, StepKind


def operations_summary(execution_id) -> dict:
    """How many operations of the execution are in each state: every state, zeros included (one query).
    ``execution_id`` may be a UUID or its text."""
    counts = dict(Operation.objects.filter(execution_id=execution_id).order_by().values_list("state")
                  .annotate(count=Count("id")))
    return {state: counts.get(state, 0) for state in OperationState.values}


def operations_summaries(execution_ids) -> dict:
    """``operations_summary`` of each of ``execution_ids`` (UUIDs, the keys of the answer), in one
    query (a page of a list)."""
    counts = {pk: dict.fromkeys(OperationState.values, 0) for pk in execution_ids}
    rows = (Operation.objects.filter(execution_id__in=counts).order_by()
            .values_list("execution_id", "state").annotate(count=Count("id")))
    for execution_id, state, count in rows:
        counts[execution_id][state] = count
    return counts


def graph(execution_id) -> dict:
    """The operations as a graph: nodes with their kind, agent, ``local`` (a local step) and
    state, ``edges`` ``[from, to]`` where ``to`` depends on ``from``, and ``order`` ``[from,
    to]`` where the workflow code asked for ``to`` after it had awaited ``from`` (the order of
    imperative code: ``to`` does not wait for it) — two queries. A child execution's step is a node of kind ``workflow`` with the
    child's id as ``child`` (a third query, when there is one)."""
    nodes = list(Operation.objects.filter(execution_id=execution_id)
                 .values("name", "kind", "operation", "agent", "local", "state", "after"))
    edges = (OperationDependency.objects.filter(operation__execution_id=execution_id).order_by("id")
             .values_list("depends_on__name", "operation__name"))
    started = {}
    if any(node["kind"] == StepKind.WORKFLOW for node in nodes):
        started = dict(Execution.objects.filter(parent_id=execution_id).values_list("parent_step", "pk"))
    order = []
    for node in nodes:
        node["child"] = started.get(node["name"]) if node["kind"] == StepKind.WORKFLOW else None
        order.extend([before, node["name"]] for before in node.pop("after") or ())
    return {"nodes": nodes, "edges": [list(edge) for edge in edges], "order": order}


def by_operation_and_state(execution_id) -> list[dict]:
    """A graph too big to draw, summarised: per registered operation, how many of its steps are
    in each state (one query)."""
    rows = (Operation.objects.filter(execution_id=execution_id).order_by()
            .values_list("operation", "state").annotate(count=Count("id")))
    table = {}
    for operation, state, count in rows:
        table.setdefault(operation, dict.fromkeys(OperationState.values, 0))[state] = count
    return [{"operation": operation, "total": sum(counts.values()), "states": counts}
            for operation, counts in sorted(table.items())]


def warnings(execution_id) -> list[dict]:
    """What an operator should know of the execution that no status says: ``{"code", "step",
    "message"}`` each, ``[]`` when there is nothing to say — what the receivers of
    ``signals.execution_warnings`` return (``unknown_agent``: ``agents.warnings``)."""
    return [warning for _, found in execution_warnings.send(sender=Execution, execution_id=execution_id)
            for warning in found or ()]


def operation_limits() -> list[dict]:
    """The limits of the registered operations that have one (``@operation(rate_limit=…,
    concurrency=…)``), by name: ``{"operation", "rate_limit", "rate_key", "concurrency",
    "concurrency_key"}`` each."""
    return [{"operation": name, **definition.limits.as_json()}
            for name, definition in sorted(registry.operations().items()) if definition.limits]


def executions_by_id_prefix(digits, shown) -> tuple[list[dict], int]:
    """The executions whose id starts with the hexadecimal ``digits`` (lowercase, 1 to 32 of
    them): the first ``shown`` by id, as ``{"id", "workflow_id", "status"}``, and how many match
    in all. One query, two when more than ``shown`` match (the count).

    The ids that start with the digits are those between the digits padded with 0s and padded
    with fs, as UUIDs: a range of the primary key's index, never a scan. A database stores a
    UUID either as 16 bytes (PostgreSQL's uuid, compared byte by byte) or as its 32 hex digits
    (elsewhere, compared as text): both order ids as their digits read, so the one range works
    on each."""
    low, high = (uuid.UUID(hex=digits.ljust(32, pad)) for pad in "0f")
    matching = Execution.objects.filter(pk__gte=low, pk__lte=high)
    rows = list(matching.order_by("pk").values("id", "workflow_id", "status")[:shown + 1])
    return rows[:shown], (len(rows) if len(rows) <= shown else matching.count())
