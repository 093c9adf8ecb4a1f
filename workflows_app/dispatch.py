"""The only code that sends Celery messages. A message names ids (and an attempt), never state.

Callers run these from ``transaction.on_commit`` so a message never names a row that is not
committed yet.

Every message says ``ignore_result=True`` itself. ``send_task`` does not read the task's or
the app's ``ignore_result`` (``task_ignore_result``): left out, the message says ``False``, which
overrides both in the worker. Each message would then make the sender subscribe to its result
channel, and the worker store a result in Redis and publish it. The result belongs in the
database, so neither is needed.
"""

import logging

from workflows_app.conf import workflows_settings
from workflows_app.models.operation import task_id_for
from workflows_app.states import OperationState

logger = logging.getLogger(__name__)

ADVANCE_TASK = "workflows_app.advance"
RUNNER_TASK = "agents.run_operation"


def _app():
    from switchyard.celery import app

    return app


def send_advance(execution_id):
    """Ask a manager to run the execution's dispatcher (start, wake or finish it)."""
    _app().send_task(ADVANCE_TASK, args=[str(execution_id)], queue=workflows_settings.MANAGEMENT_QUEUE,
                     ignore_result=True)


#: Messages sent between two writes of their ``sent`` state: an agent that gets a message
#: before that write has to make it itself, so the writes keep close behind the sends.
SENT_BATCH = 50


def send_operations(operations):
    """Send the current attempt of each operation to its agent's queue, then record those still
    ``sending`` as ``sent`` (not one the agent or a cancel already moved on): one producer (one
    broker connection) for all the messages, the ``sent`` states written a batch at a time."""
    from workflows_app.transitions import operations_transition

    app = _app()
    operations = list(operations)
    with app.producer_or_acquire() as producer:
        for start in range(0, len(operations), SENT_BATCH):
            batch = operations[start:start + SENT_BATCH]
            for operation in batch:
                app.send_task(
                    RUNNER_TASK,
                    args=[str(operation.id), operation.attempt],
                    task_id=task_id_for(operation.id, operation.attempt),
                    queue=operation.agent,
                    producer=producer,
                    ignore_result=True,
                )
            # Those the agent (or a cancel) already moved on are left out, as they should be.
            operations_transition([op for op in batch if op.state == OperationState.SENDING], OperationState.SENT)


def broadcast_kill(execution_id, attempts=(), *, dispatcher=False):
    """Ask every agent and manager to stop the process groups of ``attempts`` (pairs of operation
    id and attempt) and, with ``dispatcher``, the execution's dispatcher: SIGTERM now, SIGKILL
    after ``KILL_GRACE_SECONDS`` (``agents.control``). Fire and forget: fencing covers a worker
    that does not hear it."""
    from agents.control import KILL_COMMAND

    _app().control.broadcast(
        KILL_COMMAND,
        arguments={"execution_id": str(execution_id), "attempts": [[str(pk), attempt] for pk, attempt in attempts],
                   "dispatcher": dispatcher, "grace": float(workflows_settings.KILL_GRACE_SECONDS)},
        reply=False,
    )


def waiting_messages(queue):
    """How many messages wait in ``queue`` now; ``None`` when the broker cannot say."""
    try:
        with _app().connection_for_read() as connection:
            return connection.default_channel.queue_declare(queue=queue, passive=True).message_count
    except Exception:  # an unknown queue, a broker that does not count: unknown, not an error
        logger.debug("could not count the messages of %s", queue, exc_info=True)
        return None


def revoke(task_ids, *, terminate=False):
    """Celery's own bookkeeping for stopped attempts: a worker discards a revoked message it has
    not started, and with ``terminate`` signals the pool process running it. Fencing, not this
    in-memory list, is the guarantee (a worker started later never heard of it)."""
    task_ids = list(task_ids)
    if task_ids:
        _app().control.revoke(task_ids, terminate=terminate, signal="SIGTERM")
