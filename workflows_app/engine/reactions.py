"""What follows an execution's transition once it commits: the engine's reactions, in order.

A transition's event and the rows it wrote are seen by other processes only once its
transaction commits, so what follows it runs then, in this process, one reaction after the
other, each ``react(execution, source, target, event)``. A reaction that raises changes nothing
that was committed: it is logged and recorded as a ``listener_failed`` event, and the next one
runs.

The table is handed to ``transitions.react_with`` when the app is ready
(``WorkflowsConfig.ready``): transitions sit below the engine and cannot import it.
"""

import logging

from workflows_app.engine import children, deployments, listeners
from workflows_app.models import Execution
from workflows_app.signals import execution_status_changed
from workflows_app.states import EventType
from workflows_app.transitions import record_event

logger = logging.getLogger(__name__)


def announce(execution, source, target, event):
    """Users' receivers of the ``execution_status_changed`` signal; each one that raises is
    recorded as the others are."""
    responses = execution_status_changed.send_robust(
        sender=Execution, execution=execution, source=source, target=target, event=event)
    for receiver, response in responses:
        if isinstance(response, Exception):
            _failed(execution, target, receiver, response)


#: In this order. A terminal execution frees its deployment first, so the next queued one is
#: on its way before any listener runs.
AFTER_EXECUTION_TRANSITION = (
    deployments.start_next_when_ended,  # an execution that ended: its deployment's oldest queued one starts
    children.wake_parent_when_ended,  # a child that ended: its parent's pass takes the child's outcome
    listeners.call,  # the workflow's lifecycle listeners (@wf.on_success, register_status_listener, …)
    announce,  # the execution_status_changed signal, for the project's own receivers
)


def after_execution_transition(execution, source, target, event):
    for react in AFTER_EXECUTION_TRANSITION:
        try:
            react(execution, source, target, event)
        except Exception as exc:
            _failed(execution, target, react, exc)


def _failed(execution, target, react, exc):
    name = getattr(react, "__qualname__", repr(react))
    logger.error("%s failed after execution %s went %s", name, execution.pk, target, exc_info=exc)
    record_event(execution.pk, EventType.LISTENER_FAILED, f"{name!s} raised {type(exc).__name__}: {exc}",
                 {"listener": name, "status": target.value})
