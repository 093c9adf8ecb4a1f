"""Workflows the harness' tests run (registered as a project's workflow modules are, by the
``with_the_harness_workflows`` fixture)."""

import os

from workflows_app.sdk import EventTimeout, RecoverableError, operation, workflow


@operation
def harness_add(ctx, a, b):
    return a + b


@operation(max_retries=2, retry_interval=600)
def harness_charge(ctx, amount):
    return {"charged": amount}


@operation(max_retries=3, retry_interval=30)
def harness_busy_once(ctx, marker):
    """Fails its first attempt (a retry gets past it), without a fake."""
    if ctx.attempt == 1:
        raise RecoverableError("busy: try again")
    ctx.log("got through", attempt=ctx.attempt)
    return {"marker": marker, "attempt": ctx.attempt, "pid": os.getpid()}


@workflow
def harness_order(ctx, n=8):
    """Ten steps: n additions, an hour's sleep, a charge."""
    total = 0
    for i in range(n):
        total = ctx.await_execute(f"add-{i}", harness_add, total, i)
    ctx.sleep(3600)
    charged = ctx.await_execute("charge", harness_charge, total)
    ctx.set_payload({"total": total, **charged})


@workflow
def harness_approval(ctx, timeout=86400):
    try:
        approval = ctx.await_event("approved", timeout=timeout)
    except EventTimeout:
        ctx.set_payload({"approved_by": None})
        return
    ctx.set_payload({"approved_by": approval["user"]})


@workflow
def harness_forever(ctx):
    """Waits for an event that has no timeout: only the test can end it."""
    ctx.await_event("never")


@workflow
def harness_warehouse(ctx, skus=("apple", "pear"), agent="warehouse"):
    lines = ctx.graph()
    for sku in skus:
        lines.add(f"reserve-{sku}", harness_busy_once, sku, agent=agent)
    ctx.set_payload({"reserved": sorted(lines.run())})


@workflow
def harness_child(ctx, n=1):
    ctx.sleep(30)
    ctx.set_payload({"sum": ctx.await_execute("add", harness_add, n, 1)})


@workflow
def harness_parent(ctx, children=2):
    handles = [ctx.execute_workflow(f"child-{i}", harness_child, n=i) for i in range(children)]
    ctx.all_of(*handles).wait()
    ctx.set_payload({"children": [handle.result() for handle in handles]})


@operation(concurrency=1, rate_limit="2/m")
def harness_limited(ctx, i):
    return i


@workflow
def harness_limited_fan_out(ctx, n=4):
    """``n`` steps of an operation of one at a time and two a minute."""
    steps = ctx.graph()
    for i in range(n):
        steps.add(f"s{i}", harness_limited, i)
    ctx.set_payload({"sum": sum(steps.run().values())})
