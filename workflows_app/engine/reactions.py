"""What follows an execution's transition once it commits: the engine's reactions, in order.

A transition's event and the rows it wrote are seen by other processes only once its
transaction commits, so what follows it runs then, in this process, one reaction after the
other, each ``react(execution, source, target, event)``. A reaction that raises changes nothing
that was committed: it is logged and recorded as a ``listener_failed`` event, and the next one
runs.

The table is handed to ``transitions.react_with`` when the app is ready
(``WorkflowsConfig.ready``): transitions sit below the engine and cannot import it.
"""

from workflows_app.engine import children, concurrency, listeners, schedules
from workflows_app.models import Execution
from workflows_app.signals import execution_status_changed


def announce(execution, source, target, event):
    """Users' receivers of the ``execution_status_changed`` signal; each one that raises is
    recorded as the others are."""
    responses = execution_status_changed.send_robust(
        sender=Execution, execution=execution, source=source, target=target, event=event)
    for receiver, response in responses:
        if isinstance(response, Exception):
            listeners.record_failure(execution, target, receiver, response)


#: In this order. A terminal execution frees its slots (its workflow's limit, its deployment)
#: first, so the next queued ones are on their way before any listener runs.
AFTER_EXECUTION_TRANSITION = (
    concurrency.start_next_when_ended,  # an execution that ended: the first queued ones of its keys start
    schedules.start_buffered_when_ended,  # an execution of a schedule that ended: its buffered slot starts
    children.wake_parent_when_ended,  # a child that ended: its parent's pass takes the child's outcome
    listeners.call,  # the workflow's lifecycle listeners (@wf.on_success, register_status_listener, …)
    announce,  # the execution_status_changed signal, for the project's own receivers
)


def after_execution_transition(execution, source, target, event):
    for react in AFTER_EXECUTION_TRANSITION:
        try:
            react(execution, source, target, event)
        except Exception as exc:
            listeners.record_failure(execution, target, react, exc)
