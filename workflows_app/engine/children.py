"""Child executions: a step of a parent execution that runs another registered
workflow as an execution of its own, and follows it.

* ``ctx.execute_workflow`` stores the step (kind ``workflow``: its ``operation`` is the child's
  workflow, its ``kwargs`` the child's parameters and options: :func:`node`). When the step is
  sent (:func:`send`), the child's row is stored (``parent``, ``parent_step``), the step goes
  ``sending`` → ``sent`` → ``started`` and, once that commits, the child is started. A step
  sent again (a resume) finds its child: there is never a second one.
* A child never writes its parent's rows. Its end wakes the parent (after its commit:
  :func:`wake_parent_when_ended`, one of ``engine.reactions``; the tick
  looks for a wake-up that was lost: :func:`wake_parents_of_ended`), and the parent's dispatcher
  moves the step under the parent's lock (:func:`follow`): ``succeeded`` with the child's
  payload as its result, ``failed`` with the child's error when the child failed, timed out or
  was cancelled on its own, ``cancelled`` when the parent's own cancel reached it.

Stopping a tree is ``engine.stopping``'s (a step's child is stopped before the step is
cancelled), resuming one ``engine.resuming``'s.
"""

from django.db import connection

from workflows_app import broker
from workflows_app.engine import graph, starts
from workflows_app.errors import ExistingRunningExecution
from workflows_app.models import Execution, Operation
from workflows_app.registry import workflow_name
from workflows_app.states import (
    EXECUTION_CANCELLING,
    EXECUTION_TERMINAL,
    EventType,
    ExecutionStatus,
    OperationState,
    StepKind,
)
from workflows_app.transitions import operation_transition, record_event


def node(name, workflow, parameters, *, deployment_id=None, timeout=None) -> graph.NodeSpec:
    """The step of a child execution of ``workflow`` (a registered workflow or its name), checked
    as a start is: ``RegistrationError`` for an unknown workflow, ``ParameterError`` for
    parameters that do not fit it."""
    execution, _ = starts.build(workflow_name(workflow), parameters, deployment_id=deployment_id, timeout=timeout)
    return graph.NodeSpec(name=name, operation=execution.workflow_id, kind=StepKind.WORKFLOW,
                          kwargs={"parameters": parameters, "deployment_id": deployment_id, "timeout": timeout})


def send(execution, operations):
    """Start the child of each step of ``operations`` (pending or reset, under the parent's lock),
    or find the one it has; the step ends up ``started``. A child refused by its own deployment
    (``ExistingRunningExecution``) is never stored: its step fails with that error. Returns the
    steps it started. Either is seen by a pass of the parent without a message of its own: the
    pass that stored the step (``Replay.store``) or the one its resume sends, which
    follows a child that had ended and could not be resumed."""
    started = []
    for step in operations:
        operation_transition(step, OperationState.SENDING)
        child = Execution.objects.filter(parent_id=execution.pk, parent_step=step.name).only("pk", "status").first()
        if child is None:
            try:
                child = _create(execution, step)
            except ExistingRunningExecution as refused:
                operation_transition(step, OperationState.FAILED, message=str(refused)[:500], error={
                    "type": "ExistingRunningExecution", "message": str(refused), "traceback": ""})
                continue
            record_event(execution.pk, EventType.CHILD_STARTED, f"child execution {child.pk} ({child.workflow_id}) started",
                         {"child": str(child.pk), "workflow": child.workflow_id}, operation=step.name)
        operation_transition(step, OperationState.SENT, message=f"child execution {child.pk}", data={"child": str(child.pk)})
        operation_transition(step, OperationState.STARTED, message=f"child execution {child.pk} is {child.status}")
        started.append(step)
    return started


def _create(parent, step) -> Execution:
    options = step.kwargs
    child, created = starts.build(step.operation, options.get("parameters"), deployment_id=options.get("deployment_id"),
                                  timeout=options.get("timeout"), dry_run=parent.is_dry_run,
                                  created_by=parent.created_by, parent=parent, parent_step=step.name)
    return starts.create(child, created)


# --- the parent follows its children --------------------------------------------------------

def ended_sql(parent_id) -> str:
    """An SQL expression, true when a child of the execution whose id is the column ``parent_id``
    (quoted, qualified) has ended while its step is still ``started``. The dispatcher's lock
    asks it (``dispatcher._lock``): an execution without children pays one index probe."""
    q = connection.ops.quote_name
    ex, op = Execution._meta, Operation._meta
    step = {name: q(op.get_field(name).column) for name in ("execution", "name", "state", "kind")}
    child = {name: q(ex.get_field(name).column) for name in ("parent", "parent_step", "status")}
    terminal = ", ".join(f"'{status.value}'" for status in sorted(EXECUTION_TERMINAL))
    return (f"EXISTS (SELECT 1 FROM {q(ex.db_table)} c JOIN {q(op.db_table)} s "
            f"ON s.{step['execution']} = c.{child['parent']} AND s.{step['name']} = c.{child['parent_step']} "
            f"WHERE c.{child['parent']} = {parent_id} AND c.{child['status']} IN ({terminal}) "
            f"AND s.{step['state']} = '{OperationState.STARTED.value}' AND s.{step['kind']} = '{StepKind.WORKFLOW.value}')")


def follow(execution):
    """Under the parent's lock: each ``started`` step whose child has ended takes the child's
    outcome. A child ``cancelled`` while its parent is being cancelled is ``cancelled``; one
    cancelled on its own (by a user, its own code) is a failed step for its parent."""
    started = Operation.objects.filter(execution_id=execution.pk, kind=StepKind.WORKFLOW, state=OperationState.STARTED)
    ended = list(Execution.objects.filter(parent_id=execution.pk, status__in=EXECUTION_TERMINAL,
                                          parent_step__in=started.values("name"))
                 .only("pk", "workflow_id", "status", "error", "payload", "parent_step"))
    # Only the steps of the children that ended: a parent of many is woken by each of them.
    steps = {op.name: op for op in started.filter(name__in=[child.parent_step for child in ended])}
    for child in ended:
        target, fields = _outcome(child, parent_stopping=execution.status in EXECUTION_CANCELLING)
        operation_transition(steps[child.parent_step], target, message=f"child execution {child.pk} {child.status}",
                             data={"child": str(child.pk)}, **fields)


#: The error type of a step whose child ended without completing, by the child's status.
CHILD_ERRORS = {ExecutionStatus.FAILED: "ChildFailed", ExecutionStatus.TIMED_OUT: "ChildTimedOut",
                ExecutionStatus.CANCELLED: "ChildCancelled"}


def _outcome(child, *, parent_stopping):
    if child.status == ExecutionStatus.COMPLETED:
        return OperationState.SUCCEEDED, {"result": child.payload, "error": None}
    error = {"type": CHILD_ERRORS[child.status], "child": str(child.pk), "traceback": "",
             "message": f"child execution {child.pk} ({child.workflow_id}) {child.status}"
                        + (f": {child.error}" if child.error else "")}
    if child.status == ExecutionStatus.CANCELLED and parent_stopping:
        return OperationState.CANCELLED, {"error": {**error, "type": "Cancelled"}}
    return OperationState.FAILED, {"error": error}


def wake_parent_when_ended(execution, source, target, event):
    """A reaction: a child that ended wakes its parent, whose pass moves the child's step."""
    if target in EXECUTION_TERMINAL and execution.parent_id is not None:
        broker.send_advance(execution.parent_id)


def wake_parents_of_ended():
    """The tick's safety net: every parent with a ``started`` step whose child has ended is woken
    (the child's wake-up was lost with its process). Two queries, the first on the partial index
    of started child steps."""
    started = set(Operation.objects.filter(kind=StepKind.WORKFLOW, state=OperationState.STARTED)
                  .values_list("execution_id", "name"))
    if not started:
        return 0
    ended = (Execution.objects.filter(parent_id__in={parent for parent, _ in started}, status__in=EXECUTION_TERMINAL)
             .values_list("parent_id", "parent_step"))
    parents = {parent for parent, step in ended if (parent, step) in started}
    for pk in parents:
        broker.send_advance(pk)
    return len(parents)
