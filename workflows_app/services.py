"""The public operations on executions, used by every entry point (API, admin, commands)."""

from django.db import transaction

from workflows_app import dispatch
from workflows_app.conf import workflows_settings
from workflows_app.errors import ParameterError
from workflows_app.models import Event, Execution
from workflows_app.registry import get_workflow
from workflows_app.states import EventType, FailureMode


def start(workflow_id, parameters=None, *, deployment_id=None, failure_mode=None, timeout=None,
          wait_after_fail=None, dry_run=False, created_by="") -> Execution:
    """Create an execution (``pending``) and, once committed, send it to a manager.

    Raises ``RegistrationError`` for an unknown workflow and ``ParameterError`` for
    parameters that do not fit it.
    """
    definition = get_workflow(workflow_id)
    parameters = {} if parameters is None else parameters
    definition.check_parameters(parameters)
    failure_mode = failure_mode or definition.failure_mode or workflows_settings.FAILURE_MODE
    if failure_mode not in FailureMode.values:
        raise ParameterError(f"failure_mode must be one of {FailureMode.values}, not {failure_mode!r}")
    with transaction.atomic():
        execution = Execution.objects.create(
            workflow_id=definition.name,
            parameters=parameters,
            deployment_id=deployment_id,
            failure_mode=failure_mode,
            timeout=timeout if timeout is not None else definition.timeout,
            wait_after_fail=wait_after_fail if wait_after_fail is not None else workflows_settings.WAIT_AFTER_FAIL,
            is_dry_run=dry_run,
            created_by=created_by,
        )
        Event.objects.create(execution=execution, type=EventType.LOG, message=f"created: {definition.name}",
                             data={"parameters": parameters})
        transaction.on_commit(lambda: dispatch.send_advance(execution.pk))
    return execution
