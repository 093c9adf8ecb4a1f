"""The bundled example workflows (the default ``SWITCHYARD_WORKFLOW_MODULES``)."""

import time

from celery import chain, group

from workflows_app.sdk import NonRecoverableError, RecoverableError, StepFailed, operation, workflow


@operation
def add(ctx, x, y=0):
    return x + y


@operation
def xsum(ctx, numbers):
    return sum(numbers)


@operation(max_retries=3, retry_interval=0.5)
def flaky(ctx, failures=1):
    """Fails ``failures`` times with a RecoverableError, then succeeds."""
    if ctx.attempt <= failures:
        raise RecoverableError(f"attempt {ctx.attempt} failed on purpose")
    return ctx.attempt


@operation
def charge(ctx, amount):
    """A payment that is declined: it fails for good."""
    raise NonRecoverableError(f"card declined for {amount}")


@operation
def refund(ctx, amount):
    return f"refunded {amount}"


@operation
def pause(ctx, seconds=1.0):
    time.sleep(seconds)
    return seconds


@workflow
def demo(ctx, n=3, agent="local"):
    """A canvas (chain, group, chord) on the manager, an imperative step with a retry, a step
    that fails for good and is compensated (the workflow catches its StepFailed and refunds),
    and a fan-out/fan-in graph on the agent ``agent`` (``standalone`` runs one named ``local``)."""
    total = ctx.run_canvas(chain(add.s(1, 2), group(add.s(10), add.s(20).set(queue=agent)), xsum.s()))
    attempts = ctx.await_execute("flaky", flaky, failures=1, agent=agent)
    try:
        ctx.await_execute("charge", charge, 42, agent=agent)
        paid = "charged"
    except StepFailed:  # handled: the execution goes on, "charge" stays failed in the record
        paid = ctx.await_execute("refund", refund, 42, agent=agent)
    fan = ctx.graph()
    steps = [fan.add(f"fan-{i}", add, i, i, agent=agent) for i in range(n)]
    fan.add("fan-in", pause, 0.1, depends_on=steps)
    results = fan.run()
    ctx.set_payload({"canvas": total, "flaky_attempts": attempts, "payment": paid,
                     "fan": [results[s] for s in steps]})
