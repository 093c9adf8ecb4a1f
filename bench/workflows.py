"""Workflows, operations and plain Celery tasks of the benchmarks (``SWITCHYARD_WORKFLOW_MODULES``
includes this module in every process a benchmark starts). Operations that run a process tree
write their pids to ``$SWITCHYARD_BENCH_DIR/<tag>.json`` for the benchmark to watch."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from celery import shared_task

from workflows_app.sdk import operation, workflow

BENCH_DIR_ENV = "SWITCHYARD_BENCH_DIR"
CELERY_STUBBORN = "bench.celery_stubborn"


def _tree(tag, ignore_sigterm):
    """Start ``sleep 1000`` (ignoring SIGTERM like this process, when asked), record both pids."""
    if ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen(["sleep", "1000"])
    path = Path(os.environ[BENCH_DIR_ENV]) / f"{tag}.json"
    path.write_text(json.dumps({"pid": os.getpid(), "child": child.pid}))
    child.wait()


@operation(name="bench_tree", max_retries=0)
def tree(ctx, tag, ignore_sigterm=False):
    _tree(tag, ignore_sigterm)


@operation(name="bench_cooperative", max_retries=0)
def cooperative(ctx, tag):
    """Runs until its execution is cancelled, looking every 50 ms."""
    Path(os.environ[BENCH_DIR_ENV], f"{tag}.json").write_text(json.dumps({"pid": os.getpid()}))
    while not ctx.is_cancelled():
        time.sleep(0.05)
    return "stopped"


@workflow(name="bench_one")
def one(ctx, op, tag, agent, ignore_sigterm=False):
    """One step: ``bench_tree`` or ``bench_cooperative``, then another that must never start."""
    operations = {"tree": tree, "cooperative": cooperative}
    kwargs = {"ignore_sigterm": ignore_sigterm} if op == "tree" else {}
    ctx.await_execute("step", operations[op], tag, agent=agent, **kwargs)
    ctx.await_execute("never", cooperative, f"{tag}-never", agent=agent)


@shared_task(name=CELERY_STUBBORN)
def celery_tree(tag, ignore_sigterm=False):
    """The same process tree as a plain Celery task."""
    _tree(tag, ignore_sigterm)
