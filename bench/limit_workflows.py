"""Operations, workflows and plain Celery tasks of the operation-limits benchmark
(``bench/limits.py``, which puts this module in ``SWITCHYARD_WORKFLOW_MODULES`` of every process it
starts): an operation under a rate limit, one under a concurrency limit, a fan-out of each, and
the plain Celery tasks they are measured against."""

import time

from celery import shared_task

from workflows_app.sdk import operation, workflow

#: The limits measured (``bench/limits.py`` reads them from here).
RATE = "200/s"
RATE_COUNT = 200
CONCURRENCY = 10

CELERY_RATED = "bench.limits.celery_rated"
CELERY_SLEEP = "bench.limits.celery_sleep"


@operation(name="bench_lim_rated", max_retries=0, rate_limit=RATE)
def rated(ctx, i=0):
    """A no-op under a rate limit of the whole operation (one key)."""
    return None


@operation(name="bench_lim_slots", max_retries=0, concurrency=CONCURRENCY)
def slotted(ctx, i=0, seconds=0.05):
    """Sleeps ``seconds``, at most ``CONCURRENCY`` attempts at once for the whole operation (one key)."""
    time.sleep(seconds)
    return None


@workflow(name="bench_lim_rate_fan_out")
def rate_fan_out(ctx, n, agent):
    """``n`` independent steps of ``bench_lim_rated`` on ``agent``."""
    g = ctx.graph()
    for i in range(n):
        g.add(f"r{i:05d}", rated, i, agent=agent)
    g.run()


@workflow(name="bench_lim_slots_fan_out")
def slots_fan_out(ctx, n, seconds, agent):
    """``n`` independent steps of ``bench_lim_slots`` (each sleeping ``seconds``) on ``agent``."""
    g = ctx.graph()
    for i in range(n):
        g.add(f"s{i:05d}", slotted, i, seconds, agent=agent)
    g.run()


@shared_task(name=CELERY_RATED, rate_limit=RATE, ignore_result=False)
def celery_rated(i=0):
    """Plain Celery's rate limit (a token bucket in each worker, not global): a no-op that returns
    when it ran (``time.time()``)."""
    return time.time()


@shared_task(name=CELERY_SLEEP, ignore_result=False)
def celery_sleep(seconds=0.05):
    """Sleeps ``seconds``; returns when it began and ended (``time.time()``): plain Celery has no
    limit of a task's concurrency, this is the pool's own."""
    began = time.time()
    time.sleep(seconds)
    return began, time.time()
