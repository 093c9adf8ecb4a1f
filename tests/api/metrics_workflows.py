"""Workflows whose executions and operations last known times under the test harness' clock, for
the metrics' tests (registered by their ``with_the_metrics_workflows`` fixture)."""

from datetime import timedelta

from workflows_app.sdk import NonRecoverableError, operation, workflow

#: The harness' clock (``switchyard.clock``), set by the test: an operation moves it on by the
#: time it is meant to take, as if it worked that long.
CLOCK = None


@operation(name="metrics_work", max_retries=0)
def work(ctx, seconds, fail=False):
    CLOCK.move_to(CLOCK.current() + timedelta(seconds=seconds))
    if fail:
        raise NonRecoverableError("it fails, as the test asked")
    return seconds


@workflow(name="metrics_job")
def job(ctx, sleep=0, seconds=0.0, fail=False):
    """Sleeps ``sleep`` seconds (durably), then works ``seconds`` (an operation that fails with ``fail``)."""
    if sleep:
        ctx.sleep(sleep)
    return ctx.await_execute("work", work, seconds, fail=fail)


@workflow(name="metrics_waiting")
def waiting(ctx):
    """Waits for an event that never comes (no timeout): started until the test ends it."""
    ctx.await_event("never")
