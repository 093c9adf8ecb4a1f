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

from workflows_app.errors import ParameterError
from workflows_app.models import Operation, OperationDependency, Wait
from workflows_app.states import OperationState, WaitKind, WaitOutcome
from workflows_app.transitions import create_kept_operations, record_event

#: The stored fields of a step that its kept copy carries over (the rest is the copy's own).
KEPT_FIELDS = ("name", "kind", "operation", "args", "kwargs", "agent", "result", "input", "awaited", "after",
               "max_retries", "retry_interval", "retry_backoff", "timeout")
#: The outcomes of a wait that are kept: it ended by itself (a cancelled one is not an outcome
#: the code saw come about).
KEPT_OUTCOMES = (WaitOutcome.RECEIVED, WaitOutcome.TIMED_OUT, WaitOutcome.ELAPSED)


def redone(original, from_step) -> set:
    """The names of ``from_step`` and of every step of ``original`` that followed from it.
    ``ParameterError`` when ``original`` has no such step."""
    names = dict(Operation.objects.filter(execution=original).values_list("name", "after"))
    if from_step not in names:
        raise ParameterError(f"execution {original.pk} has no step {str(from_step)[:255]!r}")
    following = defaultdict(set)
    for step, before in OperationDependency.objects.filter(operation__execution=original) \
            .values_list("operation__name", "depends_on__name"):
        following[before].add(step)
    for step, after in names.items():
        for before in after or ():
            following[before].add(step)
    found, todo = {from_step}, [from_step]
    while todo:
        for step in following[todo.pop()] - found:
            found.add(step)
            todo.append(step)
    return found


def keep(execution, original, from_step):
    """Store in the new ``execution`` (a rerun of ``original`` from ``from_step``, in the
    transaction that creates it) the steps it keeps, succeeded at attempt 0 with their stored
    results, the edges between them, and the waits it keeps. Returns the kept steps' names."""
    again = redone(original, from_step)
    kept = [operation for operation in Operation.objects.filter(execution=original, state=OperationState.SUCCEEDED)
            if operation.name not in again]
    copies = create_kept_operations(
        [Operation(execution=execution, **{name: getattr(operation, name) for name in KEPT_FIELDS}) for operation in kept],
        message=f"kept from execution {original.pk}", data={"rerun_of": str(original.pk)})
    by_name = {copy.name: copy for copy in copies}
    OperationDependency.objects.bulk_create([
        OperationDependency(operation=by_name[step], depends_on=by_name[before])
        for step, before in OperationDependency.objects.filter(operation__execution=original)
        .values_list("operation__name", "depends_on__name")
        if step in by_name and before in by_name])
    waits = Wait.objects.filter(execution=original, kind__in=(WaitKind.EVENT, WaitKind.SLEEP), outcome__in=KEPT_OUTCOMES)
    Wait.objects.bulk_create([
        Wait(execution=execution, key=wait.key, kind=wait.kind, name=wait.name, timeout=wait.timeout, after=wait.after,
             deadline=wait.deadline, outcome=wait.outcome, payload=wait.payload, resolved_at=wait.resolved_at)
        for wait in waits if again.isdisjoint(wait.after or ())])
    names = sorted(by_name)
    record_event(execution.pk, "log", f"a rerun of execution {original.pk} from step {from_step!r}: "
                 f"{len(names)} step(s) keep their results", {"rerun_of": str(original.pk), "from_step": from_step,
                                                              "kept": names})
    return names
