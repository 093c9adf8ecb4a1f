"""Stop latency: how long cancel, force-cancel and kill take, side by side with what
plain Celery offers for the same process tree (``revoke(terminate=True)``).

Each round starts one execution whose operation runs ``sleep 1000`` in a subprocess, on a real
agent, then stops it and times, from the request:
- until the request returns (from then on no further operation of the execution can start);
- until the execution is ``cancelled``;
- until the operation's whole process tree (pool process and ``sleep``) is gone.
"""

import json
import os
import signal
import statistics
import time
from pathlib import Path

import psutil

from bench.workflows import BENCH_DIR_ENV, CELERY_STUBBORN

POLL = 0.005


def gone(pid) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait(predicate, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the benchmark waited too long ({timeout:.0f} s) for {what}")
        time.sleep(POLL)
    return time.monotonic()


def pids(bench_dir, tag, timeout=60.0):
    path = Path(bench_dir) / f"{tag}.json"
    wait(lambda: path.exists() and path.read_text().strip(), f"the operation {tag} to start", timeout)
    return json.loads(path.read_text())


def run(stack, agent, bench_dir, rounds):
    from switchyard.celery import app
    from workflows_app import services
    from workflows_app.models import Execution

    def status(pk):
        return Execution.objects.filter(pk=pk).values_list("status", flat=True).get()

    samples = {}

    def add(case, seconds):
        samples.setdefault(case, []).append(seconds)

    notes = {}
    for i in range(rounds):
        for ignore in (False, True):
            tag = f"kill-{i}-{int(ignore)}"
            execution = services.start("bench_one", {"op": "tree", "tag": tag, "agent": agent, "ignore_sigterm": ignore})
            tree = pids(bench_dir, tag)
            asked = time.monotonic()
            services.kill(execution.pk)
            returned = time.monotonic()
            ended = wait(lambda: status(execution.pk) == "cancelled", f"{tag}'s execution to be cancelled")
            tree_gone = wait(lambda: gone(tree["pid"]) and gone(tree["child"]), f"{tag}'s process tree to go")
            label = "kill, operation ignores SIGTERM" if ignore else "kill, operation obeys SIGTERM"
            add(f"{label}: request returns", returned - asked)
            add(f"{label}: execution cancelled", ended - asked)
            add(f"{label}: process tree gone", tree_gone - asked)

        tag = f"cancel-{i}"
        execution = services.start("bench_one", {"op": "cooperative", "tag": tag, "agent": agent})
        pids(bench_dir, tag)
        asked = time.monotonic()
        services.cancel(execution.pk)
        add("cancel, cooperative operation: request returns (nothing new can start)", time.monotonic() - asked)
        cancelled = wait(lambda: status(execution.pk) == "cancelled", f"{tag}'s execution to be cancelled")
        add("cancel, cooperative operation: execution cancelled", cancelled - asked)

        tag = f"force-{i}"
        execution = services.start("bench_one", {"op": "tree", "tag": tag, "agent": agent})
        tree = pids(bench_dir, tag)
        asked = time.monotonic()
        services.force_cancel(execution.pk)
        add("force-cancel: execution cancelled (processes left to finish)", time.monotonic() - asked)
        asked = time.monotonic()
        services.kill(execution.pk)  # kill of an ended execution stops its leftover processes
        add("kill after force-cancel: leftover process tree gone",
            wait(lambda: gone(tree["pid"]) and gone(tree["child"]), f"{tag}'s process tree to go") - asked)

        # Plain Celery: revoke(terminate=True) signals the pool process only.
        for sig in ("SIGTERM", "SIGKILL"):
            tag = f"celery-{i}-{sig}"
            result = app.send_task(CELERY_STUBBORN, args=[tag], queue=agent)
            tree = pids(bench_dir, tag)
            asked = time.monotonic()
            app.control.revoke(result.id, terminate=True, signal=sig)
            pool_gone = wait(lambda: gone(tree["pid"]), f"{tag}'s pool process to go")
            add(f"celery revoke(terminate=True, signal={sig}): pool process gone", pool_gone - asked)
            time.sleep(1.0)
            survived = not gone(tree["child"])
            notes[f"celery revoke(terminate=True, signal={sig}): pool process gone"] = (
                "its `sleep` child still runs afterwards" if survived else "its `sleep` child ended too")
            if survived:
                os.kill(tree["child"], signal.SIGKILL)
    return samples, notes


def report(samples, notes, grace):
    lines = [f"| stop case (KILL_GRACE_SECONDS={grace}) | median s | max s | note |", "|---|---|---|---|"]
    for case, values in samples.items():
        note = notes.get(case, "")
        lines.append(f"| {case} | {statistics.median(values):.3f} | {max(values):.3f} | {note} |")
    return "\n".join(lines)


__all__ = ["run", "report", "BENCH_DIR_ENV"]
