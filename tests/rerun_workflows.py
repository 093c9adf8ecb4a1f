"""Workflows run again from a step (tests/engine/test_reruns.py): imperative, graph and canvas."""

from celery import chain

from workflows_app.sdk import NonRecoverableError, operation, workflow


@operation(name="rr_step", max_retries=0)
def step(ctx, tag, fail=False):
    if fail:
        raise NonRecoverableError(f"{tag} failed as asked")
    return tag


@operation(name="rr_add", max_retries=0)
def add(ctx, a, b=0):
    return a + b


@workflow(name="rr_imperative")
def imperative(ctx, fail_at=""):
    """``side`` is asked for after ``a`` was awaited, and before ``b``: it follows ``a`` only."""
    a = ctx.await_execute("a", step, "a")
    side = ctx.execute("side", step, "side")
    go = ctx.await_event("go")
    b = ctx.await_execute("b", step, "b", fail=fail_at == "b")
    c = ctx.await_execute("c", step, "c", fail=fail_at == "c")
    ctx.sleep(60)
    side.wait()
    ctx.set_payload({"ran": [a, side.result(), go, b, c]})


@workflow(name="rr_graph")
def graph(ctx, fail_at=""):
    g = ctx.graph()
    a = g.add("a", step, "a")
    b = g.add("b", step, "b", fail_at == "b", depends_on=[a])
    g.add("c", step, "c", depends_on=[b])
    g.add("d", step, "d")
    ctx.set_payload(g.run())


@workflow(name="rr_canvas")
def canvas(ctx, second: int = 10):
    ctx.set_payload({"sum": ctx.run_canvas(chain(add.s(1, 2), add.s(second), add.s(100)))})
