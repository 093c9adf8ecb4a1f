"""Suspended scale (issue 7, case 5): K executions waiting for an event at once, and waking them.

Switchyard: the memory of the manager and agent process trees (RSS of each process and of its
children, the Celery pool processes) before and after K executions of ``bench_wait_event`` are
suspended on ``ctx.await_event("go")`` — a waiting execution is rows, no thread or process, so
the difference per execution can be ~0 or even negative (reported as measured). Then the event
is delivered to all K, through ``services.send_event`` (what ``POST /executions/{id}/events``
calls), one after another, and the time until all K are ``completed`` is the wake time.

Plain Celery has no durable wait: a task that waits for an event holds a worker slot — a pool
process — for as long as it waits. Its column is that cost: the RSS of one idle pool process of
the agent times K ("a task blocked in a worker per waiting run"). Nothing is run for it.
"""

import statistics
import time
import uuid

import psutil
from django.db import transaction

POLL = 0.05
TIMEOUT = 1800.0
#: Starts per transaction: their advances are sent when it commits.
BATCH = 500


def tree_rss(pid) -> int:
    """RSS in bytes of a process and every process below it (its Celery pool processes)."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def pool_process_rss(pid) -> int:
    """RSS of one idle pool process of the worker ``pid``: the median of its leaf processes."""
    try:
        leaves = [p for p in psutil.Process(pid).children(recursive=True) if not p.children()]
        values = [p.memory_info().rss for p in leaves]
    except psutil.NoSuchProcess:
        values = []
    return int(statistics.median(values)) if values else 0


def _wait_until(count, what, timeout=TIMEOUT):
    """Poll ``count()`` until it returns True; the seconds it took."""
    began = time.monotonic()
    while not count():
        if time.monotonic() - began > timeout:
            raise TimeoutError(f"benchmark: {what} not reached after {timeout} s")
        time.sleep(POLL)
    return time.monotonic() - began


def run(stack, processes, k):
    """Measure the case for ``k`` waiting executions; ``processes``: the manager's and the agent's
    ``StackProcess``. Returns the rows of :func:`report`."""
    from workflows_app import services
    from workflows_app.models import Execution, Wait
    from workflows_app.states import ExecutionStatus, WaitOutcome

    tag = uuid.uuid4().hex[:8]
    mine = Execution.objects.filter(workflow_id="bench_wait_event", parameters__run=tag)
    pids = [p.pid for p in processes]
    agent_pid = processes[-1].pid

    # Warm up (imports, connections, pool processes) with one execution, untimed.
    warm = services.start("bench_wait_event", {"run": f"{tag}-warm"})
    _wait_until(lambda: Wait.objects.filter(execution_id=warm.pk).exists(), "the warm-up wait")
    services.send_event(warm.pk, "go", "warm")
    _wait_until(lambda: Execution.objects.filter(pk=warm.pk, status=ExecutionStatus.COMPLETED).exists(), "the warm-up")

    before = sum(tree_rss(pid) for pid in pids)
    began = time.monotonic()
    ids = []
    for first in range(0, k, BATCH):
        with transaction.atomic():
            ids += [services.start("bench_wait_event", {"run": tag}).pk for _ in range(first, min(k, first + BATCH))]
    waiting = Wait.objects.filter(execution__in=mine, outcome=WaitOutcome.WAITING)
    _wait_until(lambda: waiting.count() == k and mine.filter(status=ExecutionStatus.STARTED).count() == k,
                f"{k} executions suspended on their wait")
    suspend_seconds = time.monotonic() - began
    time.sleep(1.0)  # let the workers settle after the burst
    after = sum(tree_rss(pid) for pid in pids)
    per_pool_process = pool_process_rss(agent_pid)

    began = time.monotonic()
    for i, execution_id in enumerate(ids):
        services.send_event(execution_id, "go", {"i": i})
    delivered = time.monotonic() - began
    _wait_until(lambda: mine.filter(status=ExecutionStatus.COMPLETED).count() == k, f"{k} executions woken and completed")
    wake_seconds = time.monotonic() - began
    wrong = mine.exclude(payload__go__has_key="i").count()
    if wrong:
        raise RuntimeError(f"benchmark: {wrong} woken executions do not carry their event's payload")

    mb = 1024 * 1024
    return [
        ("suspended: RSS of manager + agent trees, idle (MB)", before / mb, None, ""),
        (f"suspended: RSS with {k} executions waiting (MB)", after / mb, (before + k * per_pool_process) / mb,
         f"Celery: idle RSS + {k} × one pool process ({per_pool_process / mb:.1f} MB), a task blocked in a worker per waiting run"),
        ("suspended: memory per waiting execution (bytes)", (after - before) / k, per_pool_process,
         "Switchyard: (after − before) / K, as measured (a waiting execution is rows); Celery: one worker slot each"),
        (f"suspended: {k} starts until all wait (s)", suspend_seconds, None, "services.start in batches; manager concurrency as above"),
        (f"wake: {k} events delivered until all completed (s)", wake_seconds, None,
         f"delivery alone {delivered:.1f} s (services.send_event, one by one); Celery: no durable wait to wake"),
        ("wake: executions woken per second (/s)", k / wake_seconds, None, "higher is better"),
    ]


def report(rows):
    lines = ["| suspended case | Switchyard | plain Celery | ratio Switchyard / Celery | note |",
             "|---|---|---|---|---|"]
    for case, switchyard, celery, note in rows:
        ratio = f"{switchyard / celery:.4f}" if celery else "n/a"
        lines.append(f"| {case} | {_fmt(switchyard)} | {_fmt(celery)} | {ratio} | {note} |")
    return "\n".join(lines)


def _fmt(value):
    if value is None:
        return "n/a"
    return f"{value:,.1f}" if abs(value) < 1e6 else f"{value:,.0f}"


__all__ = ["run", "report"]
