"""Thin Celery tasks of the manager: they take an id and call the engine."""

from celery import shared_task

from workflows_app.dispatch import ADVANCE_TASK


@shared_task(name=ADVANCE_TASK, ignore_result=True)
def advance(execution_id):
    from agents import local
    from workflows_app.engine.dispatcher import advance as run

    # Recorded while it runs, so that a kill can find this process group (agents.control).
    key = local.dispatcher_key(execution_id)
    local.mark_running(key)
    try:
        run(execution_id)
    finally:
        local.mark_done(key)
