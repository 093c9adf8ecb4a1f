"""Carrying on from the database after a restart: what a manager sends again when it
starts, and what its tick sends again when the broker comes back without the messages it held.

The database says what is to happen; messages are only ever sent again from it:

* every active execution gets an ``advance`` (any manager carries on any execution; a
  cancelling one is stopped again, a kill carried out again);
* operations ``sending`` or ``sent`` are sent again under the *same* attempt id: the agent that
  gets a second delivery of an attempt drops it (fencing), so a message that was never lost
  costs one dropped duplicate, and one that was lost runs once.

Which ``started`` operations still run is for the workers to say: a starting manager asks them
(``agents.worker.manager``) and records the others lost.
"""

import logging
import time

from workflows_app import broker, clock
from workflows_app.engine import progress, starts
from workflows_app.models import Execution, Operation
from workflows_app.states import EXECUTION_RUNNING, ExecutionStatus, OperationState

logger = logging.getLogger(__name__)


def carry_on_executions() -> int:
    """An ``advance`` for every execution that is pending (but for a deferred start not due
    yet: the tick sends it then), started or stopping."""
    running = Execution.objects.filter(status__in=EXECUTION_RUNNING).values_list("pk", flat=True)
    pks = list(starts.startable(clock.now()).values_list("pk", flat=True)) + list(running)
    for pk in pks:
        broker.send_advance(pk)
    return len(pks)


def resend_in_flight() -> int:
    """Send every ``sending`` or ``sent`` operation of a started execution again, same attempt."""
    in_flight = Operation.objects.filter(state__in=[OperationState.SENDING, OperationState.SENT],
                                         execution__status=ExecutionStatus.STARTED)
    operations = list(in_flight)
    progress.publish(operations)
    return len(operations)


class BrokerWatch:
    """Notices that the broker came back as a new server (Redis' ``run_id`` changed: a restart,
    whose queues a Redis without persistence has lost) and then sends again, from the database,
    whatever was in flight. Brokers whose queues survive a restart (RabbitMQ's durable queues)
    are not watched."""

    def __init__(self):
        self.identity = None
        self.checked_at = 0.0

    def check(self, every=5.0):
        if time.monotonic() - self.checked_at < every:
            return False
        self.checked_at = time.monotonic()
        identity = broker.broker_identity()
        previous, self.identity = self.identity, identity
        if previous is None or identity is None or identity == previous:
            return False
        logger.warning("the broker restarted (%s -> %s): sending again what was in flight", previous, identity)
        resend_in_flight()
        carry_on_executions()
        return True


#: The manager's watch, read at its start and then by its tick.
broker_watch = BrokerWatch()
