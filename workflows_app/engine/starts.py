"""A new execution, built from its workflow's definition: what a start from outside
(``services.start``) and a child's start (``engine.children``) share."""

from contextlib import nullcontext

from django.db import transaction

from workflows_app import broker, values
from workflows_app.conf import workflows_settings
from workflows_app.engine import deployments
from workflows_app.errors import ExistingRunningExecution, ParameterError, ValueRefused
from workflows_app.models import Event, Execution
from workflows_app.registry import get_workflow
from workflows_app.states import EventType, ExecutionStatus, FailureMode
from workflows_app.transitions import create_execution, execution_transition


def build(workflow_id, parameters=None, *, deployment_id=None, failure_mode=None, timeout=None, wait_after_fail=None,
          dry_run=False, created_by="", parent=None, parent_step="", rerun_of=None, rerun_from="") -> tuple[Execution, Event]:
    """The unsaved execution (``pending``) and its first event (``transitions.create_execution``
    stores both); ``rerun_of`` and ``rerun_from``: the execution and the step it runs again from
    (``engine.reruns`` stores what it keeps). Raises ``RegistrationError`` for an unknown workflow, ``ParameterError`` for
    parameters that do not fit it or an unknown failure mode, and ``ValueRefused`` (a
    ``ParameterError``) for parameters that may not be stored."""
    definition = get_workflow(workflow_id)
    parameters = {} if parameters is None else parameters
    definition.check_parameters(parameters)
    values.check(parameters, "parameters")
    if deployment_id is not None and values.string_problem(str(deployment_id)):
        raise ValueRefused("deployment_id", values.string_problem(str(deployment_id)))
    failure_mode = failure_mode or definition.failure_mode or workflows_settings.FAILURE_MODE
    if failure_mode not in FailureMode.values:
        raise ParameterError(f"failure_mode must be one of {FailureMode.values}, not {failure_mode!r}")
    execution = Execution(
        workflow_id=definition.name,
        parameters=parameters,
        deployment_id=deployment_id,
        failure_mode=failure_mode,
        timeout=timeout if timeout is not None else definition.timeout,
        wait_after_fail=wait_after_fail if wait_after_fail is not None else workflows_settings.WAIT_AFTER_FAIL,
        is_dry_run=dry_run,
        created_by=created_by,
        parent=parent,
        parent_step=parent_step,
        rerun_of=rerun_of,
        rerun_from=rerun_from,
    )
    data = {"parameters": parameters}
    if parent is not None:
        data.update(parent=str(parent.pk), parent_step=parent_step)
    if rerun_of is not None:
        data.update(rerun_of=str(rerun_of.pk), rerun_from=rerun_from)
    created = Event(type=EventType.LOG, message=f"created: {definition.name}", data=data)
    return execution, created


def create(execution, created, *, queue=False, force=False) -> Execution:
    """Store ``execution`` and its first event (:func:`build`) and, once committed, send it to a
    manager. A ``deployment_id`` that has an active execution refuses it
    (``ExistingRunningExecution``, nothing stored) unless ``queue`` (it waits ``queued`` and
    starts when the deployment is free, in order) or ``force`` (it runs beside the other)."""
    checks_holder = bool(execution.deployment_id) and not force
    # Without a deployment to check, the execution and its event are stored by one statement
    # (create_execution), which needs no transaction of its own; on_commit then sends at once
    # (or, in a caller's transaction, once it commits).
    with transaction.atomic() if checks_holder else nullcontext():
        create_execution(execution, created)
        holder = deployments.active_of(execution.deployment_id) if checks_holder else None
        if holder is not None and holder != execution.pk:
            if not queue:
                raise ExistingRunningExecution(execution.deployment_id, holder)  # rolls the new row back
            return execution_transition(execution, ExecutionStatus.QUEUED, message=f"queued behind {holder}")
        broker.send_advance_on_commit(execution)
    return execution
