"""Running an execution again from one of its steps: a new execution of the same workflow in which
every step of the original that succeeded keeps its stored result and never runs again, except
``from_step`` and what followed from it. Replay does the rest: the workflow function runs from the
top, a kept step returns its stored result, and the steps that are not kept run.

What followed from ``from_step`` is read from the original's stored graph, transitively: the steps
that depend on it (a graph's or a canvas' edges) and the steps the workflow code asked for after it
had awaited it (``Operation.after``, the order of imperative code). A step the code asked for
without waiting for ``from_step`` keeps its result.

A stored wait of the original (a durable sleep, an event it took) keeps its outcome too, unless
the code reached it after it had awaited one of those steps (``Wait.after``): that one is waited
for again.
"""

from collections import defaultdict
from dataclasses import dataclass

from workflows_app.errors import ParameterError
from workflows_app.models import Operation, OperationDependency, Wait
from workflows_app.states import OperationState, WaitKind, WaitOutcome
from workflows_app.transitions import create_kept_operations, record_event

#: The stored fields of a step that its kept copy carries over (the rest is the copy's own).
KEPT_FIELDS = ("name", "kind", "operation", "args", "kwargs", "agent", "local", "result", "input", "awaited", "after",
               "max_retries", "retry_interval", "retry_backoff", "timeout")
#: The outcomes of a wait that are kept: it ended by itself (a cancelled one is not an outcome
#: the code saw come about).
KEPT_OUTCOMES = (WaitOutcome.RECEIVED, WaitOutcome.TIMED_OUT, WaitOutcome.ELAPSED)


@dataclass(frozen=True)
class Plan:
    """What a rerun of ``original`` from ``from_step`` keeps, read once: the steps that succeeded
    and did not follow from it, the edges between them, and the waits that did not follow from it."""
    original: object
    from_step: str
    kept: list
    edges: list
    waits: list


def plan(original, from_step) -> Plan:
    """The plan of a rerun of ``original`` from ``from_step`` (its steps and edges read once).
    ``ParameterError`` when ``original`` has no such step."""
    operations = list(Operation.objects.filter(execution=original))
    if from_step not in {operation.name for operation in operations}:
        raise ParameterError(f"execution {original.pk} has no step {str(from_step)[:255]!r}")
    edges = list(OperationDependency.objects.filter(operation__execution=original)
                 .values_list("operation__name", "depends_on__name"))
    again = _followed_from(from_step, operations, edges)
    kept = [operation for operation in operations
            if operation.state == OperationState.SUCCEEDED and operation.name not in again]
    names = {operation.name for operation in kept}
    waits = [wait for wait in Wait.objects.filter(execution=original, kind__in=(WaitKind.EVENT, WaitKind.SLEEP),
                                                  outcome__in=KEPT_OUTCOMES)
             if again.isdisjoint(wait.after or ())]
    return Plan(original, from_step, kept, [(step, before) for step, before in edges
                                            if step in names and before in names], waits)


def _followed_from(from_step, operations, edges) -> set:
    """``from_step`` and the names of the steps that followed from it, transitively: through the
    graph's edges and the order of imperative code (``Operation.after``)."""
    following = defaultdict(set)
    for step, before in edges:
        following[before].add(step)
    for operation in operations:
        for before in operation.after or ():
            following[before].add(operation.name)
    found, todo = {from_step}, [from_step]
    while todo:
        for step in following[todo.pop()] - found:
            found.add(step)
            todo.append(step)
    return found


def keep(execution, plan):
    """Store in the new ``execution`` (a rerun, in the transaction that creates it) what ``plan``
    keeps: the steps, succeeded at attempt 0 with their stored results, the edges between them,
    and the waits. Returns the kept steps' names."""
    original = plan.original
    copies = create_kept_operations(
        [Operation(execution=execution, **{name: getattr(operation, name) for name in KEPT_FIELDS})
         for operation in plan.kept],
        message=f"kept from execution {original.pk}", data={"rerun_of": str(original.pk)})
    by_name = {copy.name: copy for copy in copies}
    OperationDependency.objects.bulk_create([
        OperationDependency(operation=by_name[step], depends_on=by_name[before]) for step, before in plan.edges])
    Wait.objects.bulk_create([
        Wait(execution=execution, key=wait.key, kind=wait.kind, name=wait.name, timeout=wait.timeout, after=wait.after,
             deadline=wait.deadline, outcome=wait.outcome, payload=wait.payload, resolved_at=wait.resolved_at)
        for wait in plan.waits])
    names = sorted(by_name)
    record_event(execution.pk, "log", f"a rerun of execution {original.pk} from step {plan.from_step!r}: "
                 f"{len(names)} step(s) keep their results", {"rerun_of": str(original.pk),
                                                              "from_step": plan.from_step, "kept": names})
    return names
