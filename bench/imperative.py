"""Replay at length (issue 19, case 1): an imperative chain — M no-op steps, each awaited with
``ctx.await_execute`` before the next is asked for, so that every step is a pass of the workflow
function — per step, at a short and a long M, against the same chain built as a graph (no pass
of the function between steps) at the long M, and a plain Celery ``chain`` at the short M.

Without live runs (``engine.live``) every pass replays the function from the top and loads every
stored operation, so the per-step cost grows with M (quadratic in all). With them, a pass goes on
from where the last stopped: the per-step cost should not depend on M.

Celery's side runs at the short M only: a ``chain`` message carries the rest of the chain, so
its cost per link grows with the chain's length (a chain of 10,000 would send ~50,000 signatures
per message on average).
"""

import time

from bench.throughput import POLL, TIMEOUT, Row, _switchyard
from bench.workflows import CELERY_NOOP

DEFAULT_SIZES = {"short": 100, "long": 10000}


def run(stack, agent, sizes=None):
    """One measurement of each (the long chains take minutes); returns ``throughput.Row`` s in
    milliseconds per step."""
    from celery import chain

    from switchyard.celery import app

    sizes = {**DEFAULT_SIZES, **(sizes or {})}
    short, long_ = sizes["short"], sizes["long"]
    _switchyard("bench_imperative_chain", {"m": 2, "agent": agent})  # warm-up, untimed

    def per_step(workflow, m):
        return _switchyard(workflow, {"m": m, "agent": agent}) / m * 1000

    celery = []
    if app.conf.result_backend:
        signatures = [app.signature(CELERY_NOOP, queue=agent, immutable=True) for _ in range(short)]
        asked = time.monotonic()
        result = chain(signatures).apply_async()
        result.get(timeout=TIMEOUT, interval=POLL, disable_sync_subtasks=False)
        celery = [(time.monotonic() - asked) / short * 1000]
        result.forget()
    rows = [
        Row(f"imperative chain: {short} awaited no-ops, per step", [per_step("bench_imperative_chain", short)], celery, unit="ms"),
        Row(f"imperative chain: {long_} awaited no-ops, per step", [per_step("bench_imperative_chain", long_)], [], unit="ms"),
        Row(f"graph chain: {long_} no-ops, per step", [per_step("bench_chain", long_)], [], unit="ms"),
    ]
    return rows


def report(rows):
    """The rows, and the two ratios of the target: long / short, imperative / graph."""
    from bench.throughput import report as table

    short, long_, graph = (row.switchyard[0] for row in rows)
    return "\n".join([
        table(rows),
        "",
        f"imperative per step, long / short: {long_ / short:.2f} (target: at most 1.5); "
        f"imperative / graph at the long length: {long_ / graph:.2f} (target: at most 1.5)",
    ])


__all__ = ["run", "report", "DEFAULT_SIZES"]
