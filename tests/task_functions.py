"""Tasks of Django's Tasks framework, as a project writes them (nothing of Switchyard's in them
but ``RecoverableError``), for the tests of the Switchyard backend. Imported by the test process
and, by their module path, by the managers and agents that run them."""

import asyncio
import os
import signal
import time

from django.dispatch import receiver

from tests.workflows import invocations, mark
from workflows_app.sdk import RecoverableError
from workflows_app.tasks_framework import task, task_finished, task_started


@receiver(task_started)
@receiver(task_finished)
def signalled(sender, task_result, **kwargs):
    """A project's receiver: marks ``signal-<result id>`` with the status each signal carried, in
    the process that sent it."""
    mark(None, f"signal-{task_result.id}", status=task_result.status, attempt=len(task_result.worker_ids))


@task
def add(x, y=0):
    return x + y


@task
def fails(message):
    raise ValueError(message)


@task(takes_context=True)
def twice_busy(context, tag):
    """Raises RecoverableError on its first two attempts, then returns what it saw."""
    mark(None, tag, attempt=context.attempt)
    if context.attempt <= 2:
        raise RecoverableError(f"busy on attempt {context.attempt}")
    return {"attempt": context.attempt, "id": context.task_result.id, "args": context.task_result.args}


@task
def sleeps(tag, seconds):
    """Marks ``tag`` (its pid and process group in the marker), then sleeps ``seconds``."""
    mark(None, tag)
    time.sleep(seconds)
    return seconds


@task
def stubborn(tag, seconds):
    """Marks ``tag``, then sleeps ``seconds`` through SIGTERM: only SIGKILL stops it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    mark(None, tag)
    time.sleep(seconds)
    return seconds


@task
def held(tag, until):
    """Marks ``tag``, then waits (60 s at most) until ``until`` is marked."""
    mark(None, tag)
    deadline = time.monotonic() + 60
    while not invocations(until) and time.monotonic() < deadline:
        time.sleep(0.05)
    return tag


@task
def records(tag):
    """Marks ``tag`` (so the order in which several ran shows), returns this process' agent."""
    mark(None, tag)
    return os.environ.get("SWITCHYARD_AGENT_NAME", "")


@task
async def async_add(x, y):
    await asyncio.sleep(0)
    return x + y


@task
def returns_a_set():
    return {1, 2}
