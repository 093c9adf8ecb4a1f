"""Thin Celery tasks of the manager: they take an id and call the engine. (A manager records
the process group of the dispatcher it runs: ``agents.worker.pool``.)"""

from celery import shared_task

from workflows_app.dispatch import ADVANCE_TASK, TASK_OPTIONS
from workflows_app.engine.dispatcher import advance as run


@shared_task(name=ADVANCE_TASK, **TASK_OPTIONS)
def advance(execution_id):
    run(execution_id)
