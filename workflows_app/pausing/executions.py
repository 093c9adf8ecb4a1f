"""Pause and unpause one execution, once the service allowed it (its row is locked).

What "sends nothing new" rests on: every path that sends a step asks first whether the
execution takes new calls (``engine.policy.allows_new_calls``: only a ``started`` one does),
and the queries that pick work for the tick — retries due, timers due, steps a limit held back —
read ``started`` executions only, so that a paused one's work is not picked again and again, in
front of the others'.
"""

from workflows_app import broker
from workflows_app.engine import progress
from workflows_app.flow import gate
from workflows_app.models import Execution, Operation
from workflows_app.states import OPERATION_WAITING_TO_SEND, ExecutionStatus, OperationState
from workflows_app.transitions import execution_transition


def pause(execution) -> Execution:
    """``started`` -> ``paused``, with its ``workflow_paused`` event. Its dispatcher, if one is
    running the workflow code, finished its pass before the lock was given to this: what that
    pass sent was sent before the pause."""
    return execution_transition(execution, ExecutionStatus.PAUSED, message="pause requested (started -> paused)",
                                data={"action": "pause"})


def unpause(execution) -> Execution:
    """``paused`` -> ``started``, with its ``workflow_unpaused`` event; once this commits its
    dispatcher is woken, its steps that became ready meanwhile are sent, and the limits its
    held-back steps wait for are looked at again. The tick sends its retries that fell due and
    fires its timers that passed."""
    execution_transition(execution, ExecutionStatus.STARTED, message="unpause requested (paused -> started)",
                         data={"action": "unpause"})
    broker.send_advance_on_commit(execution)
    # The steps of a graph that became ready while it was paused: a graph's next steps are sent
    # when the step before ends, which was then refused.
    waiting = Operation.objects.filter(execution_id=execution.pk, state__in=OPERATION_WAITING_TO_SEND)
    progress.send_ready(execution, list(waiting.filter(state=OperationState.PENDING, pending_dependencies=0,
                                                       flow_wait="")))
    held = list(waiting.exclude(flow_wait="").order_by().values_list("operation", flat=True).distinct())
    if held:
        gate.drain_on_commit(held)
    return execution
