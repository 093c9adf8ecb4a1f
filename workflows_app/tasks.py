"""Thin Celery tasks of the manager: they take an id and call the engine. (A manager records
the process group of the dispatcher it runs: ``agents.worker.pool``.) An advance sends no task
event (``broker.send_advance`` says why)."""

from celery import shared_task
from celery.exceptions import Reject

from workflows_app import outages
from workflows_app.broker import ADVANCE_TASK, TASK_OPTIONS
from workflows_app.engine.dispatcher import run_pass
from workflows_app.errors import DatabaseUnavailable
from workflows_app.tracing import logs


@shared_task(name=ADVANCE_TASK, send_events=False, **TASK_OPTIONS)
def advance(execution_id):
    # A database outage is waited out (each pass of the dispatcher is safe to run again); past
    # DATABASE_OUTAGE_TOLERANCE the message goes back to the queue.
    try:
        with logs.about(execution_id):  # the pass' log records carry the execution's id
            outages.ride_out(f"a pass over {execution_id}", run_pass, execution_id)
    except DatabaseUnavailable:
        raise Reject("the database is unavailable", requeue=True) from None
