"""Child executions (issue 20): a parent that starts N children at once, each an execution of
one no-op step, against a Celery ``group`` of N no-ops and against Switchyard's own fan-out of N
no-op steps. What a child costs beyond a step is an execution of its own: its row and events, a
dispatcher pass to start it and one to end it, and its parent's pass that follows it (each
child's end wakes the parent; those wake-ups that come after the parent completed are passes
that find nothing to do, which the next measurement waits out).
"""

import statistics
import time

from bench.throughput import Row, _celery, _switchyard
from bench.workflows import CELERY_NOOP

DEFAULT_CHILDREN = 200


def run(stack, agent, rounds, n=DEFAULT_CHILDREN):
    """Rows in milliseconds per child (per no-op for the group and the fan-out)."""
    from celery import group

    from switchyard.celery import app

    _switchyard("bench_children", {"n": 2, "agent": agent})  # warm-up, untimed
    children, fan_out, celery = [], [], []
    for _ in range(rounds):
        children.append(_switchyard("bench_children", {"n": n, "agent": agent}) / n * 1000)
        _settle(stack.management_queue)
        fan_out.append(_switchyard("bench_fan_out", {"n": n, "agent": agent}) / n * 1000)
        _settle(stack.management_queue)
        if app.conf.result_backend:
            noop = app.signature(CELERY_NOOP, queue=agent, immutable=True)
            celery.append(_celery(group([noop.clone() for _ in range(n)])) / n * 1000)
    return [Row(f"children: {n} child executions of one no-op, per child (Celery: group)", children, celery, unit="ms"),
            Row(f"fan-out: {n} no-op steps, per step (Celery: group)", fan_out, celery, unit="ms")]


def _settle(queue, timeout=60.0):
    """Untimed: until the manager has taken every message of ``queue`` (the wake-ups of a parent
    that completed), and a moment for the last to run."""
    from workflows_app import broker

    deadline = time.monotonic() + timeout
    while (broker.waiting_messages(queue) or 0) > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)


def report(rows):
    """The rows, and what a child costs beyond a step."""
    from bench.throughput import report as table

    child, step = (statistics.median(row.switchyard) for row in rows)
    return "\n".join([table(rows), "", f"A child costs {child - step:.1f} ms more than a step of a fan-out "
                                       f"({child / step:.1f} times as much)."])
