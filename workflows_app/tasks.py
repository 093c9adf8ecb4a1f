"""Thin Celery tasks of the manager: they take an id and call the engine."""

from celery import shared_task

from workflows_app.dispatch import ADVANCE_TASK


@shared_task(name=ADVANCE_TASK, ignore_result=True)
def advance(execution_id):
    from workflows_app.engine.dispatcher import advance as run

    run(execution_id)
