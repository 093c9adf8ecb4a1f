"""What the entry points show of executions: the read-only queries the API, the admin and the
commands share, each a constant number of queries however many operations there are."""

import datetime
import uuid

from django.db.models import Count, Min

from agents.models import Agent
from workflows_app.conf import workflows_settings
from workflows_app.models import Execution, Operation, OperationDependency
from workflows_app.states import OperationState, StepKind

#: The warning of steps waiting for an agent that was never seen or is offline.
UNKNOWN_AGENT = "unknown_agent"


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
    """The operations as a graph: nodes with their kind and state, and edges ``[from,
    to]`` where ``to`` depends on ``from`` (two queries). A child execution's step is a node of
    kind ``workflow`` with the child's id as ``child`` (a third query, when there is one)."""
    nodes = list(Operation.objects.filter(execution_id=execution_id).values("name", "kind", "operation", "agent", "state"))
    edges = (OperationDependency.objects.filter(operation__execution_id=execution_id).order_by("id")
             .values_list("depends_on__name", "operation__name"))
    started = {}
    if any(node["kind"] == StepKind.WORKFLOW for node in nodes):
        started = dict(Execution.objects.filter(parent_id=execution_id).values_list("parent_step", "pk"))
    for node in nodes:
        node["child"] = started.get(node["name"]) if node["kind"] == StepKind.WORKFLOW else None
    return {"nodes": nodes, "edges": [list(edge) for edge in edges]}


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
    "message"}`` each, ``[]`` when there is nothing to say.

    ``unknown_agent``: steps sent to an agent (``sending`` or ``sent``) that has never been seen
    (no heartbeat ever reached a manager), or whose last heartbeat is older than
    ``WORKFLOWS["AGENT_OFFLINE_AFTER_SECONDS"]``: nothing will run them until an agent of that
    name comes. One warning per such agent, in the order of their names; ``step`` is its waiting
    step first by name, and the message counts the others. Steps on the managers' queue and
    child executions wait for no agent. Two queries (one when no step is sent)."""
    waiting = (Operation.objects.filter(execution_id=execution_id, kind=StepKind.OPERATION,
                                        state__in=[OperationState.SENDING, OperationState.SENT])
               .exclude(agent__in=["", workflows_settings.MANAGEMENT_QUEUE]).order_by()
               .values_list("agent").annotate(first=Min("name"), count=Count("id")))
    waiting = {agent: (first, count) for agent, first, count in waiting}
    if not waiting:
        return []
    seen = dict(Agent.objects.filter(name__in=waiting).values_list("name", "last_heartbeat"))
    threshold = Agent.objects.online_threshold()
    found = []
    for agent, (step, count) in sorted(waiting.items()):
        beat = seen.get(agent)
        if beat is not None and beat >= threshold:
            continue
        if beat is None:  # no row, or a row no heartbeat ever set
            why = "which has never been seen"
        else:
            why = (f"which has been offline since {beat.astimezone(datetime.timezone.utc):%Y-%m-%d %H:%M:%S} UTC "
                   f"(no heartbeat for more than {workflows_settings.AGENT_OFFLINE_AFTER_SECONDS:g}s)")
        others = f" and {count - 1} other step{'s' if count > 2 else ''}" if count > 1 else ""
        found.append({"code": UNKNOWN_AGENT, "step": step,
                      "message": f"step {step!r}{others} wait{'s' if count == 1 else ''} for agent {agent!r}, {why}"})
    return found


def executions_by_id_prefix(digits, shown=3) -> tuple[list[dict], int]:
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
