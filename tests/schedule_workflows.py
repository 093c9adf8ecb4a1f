"""Workflows that schedules start in the tests of ``engine.schedules`` (no operations: what matters
is how long each execution stays active)."""

from workflows_app.sdk import workflow


@workflow
def sched_nap(ctx, seconds=0):
    """Active for ``seconds`` (a durable sleep; 0: it ends at once)."""
    if seconds:
        ctx.sleep(seconds)
    ctx.set_payload({"slept": seconds})
