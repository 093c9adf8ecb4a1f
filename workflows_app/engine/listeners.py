"""Lifecycle listeners (Axon's): called after an execution's status change is committed
(:func:`call`, one of ``engine.reactions``).

``@wf.on_success`` / ``on_failure`` / ``on_cancellation`` / ``on_timeout`` and
``register_status_listener(status, fn, workflow=None)`` are called ``fn(status, ctx)``. A
listener that raises is recorded as a ``listener_failed`` event and changes nothing.
"""

import logging

from workflows_app.engine.context import WorkflowContext
from workflows_app.engine.replay import Replay
from workflows_app.errors import RegistrationError
from workflows_app.models import Operation
from workflows_app.registry import get_workflow
from workflows_app.states import EventType, ExecutionStatus
from workflows_app.transitions import record_event

logger = logging.getLogger(__name__)

_status_listeners = []  # (status, fn, workflow name or None)


def register_status_listener(status, fn, workflow=None):
    """Call ``fn(status, ctx)`` whenever an execution (of ``workflow``, or any) enters ``status``."""
    _status_listeners.append((ExecutionStatus(status), fn, workflow))
    return fn


def unregister_status_listener(status, fn, workflow=None):
    _status_listeners.remove((ExecutionStatus(status), fn, workflow))


def call(execution, source, target, event):
    """A reaction: the listeners of ``target`` (of this workflow, or of any) are called, in order."""
    listeners = [fn for status, fn, wf in _status_listeners if status == target and wf in (None, execution.workflow_id)]
    try:
        listeners += get_workflow(execution.workflow_id).listeners.get(target, [])
    except RegistrationError:
        pass
    if not listeners:
        return
    ctx = WorkflowContext(Replay(execution, Operation.objects.filter(execution_id=execution.pk)))
    for fn in listeners:
        try:
            fn(ExecutionStatus(target), ctx)
        except Exception as exc:
            record_failure(execution, target, fn, exc)


def record_failure(execution, target, fn, exc):
    """``fn`` (a listener, or any reaction to ``execution`` entering ``target``) raised ``exc``:
    logged, and recorded as a ``listener_failed`` event naming it."""
    name = getattr(fn, "__qualname__", repr(fn))
    logger.error("%s failed after execution %s went %s", name, execution.pk, target, exc_info=exc)
    record_event(execution.pk, EventType.LISTENER_FAILED, f"{name} raised {type(exc).__name__}: {exc}",
                 {"listener": name, "status": ExecutionStatus(target).value})
