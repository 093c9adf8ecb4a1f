"""Workflows of tests/integration/test_redelivery_races.py: operation messages that wait — in an
agent's queue, or delivered to the agent and not started yet — while an agent or a manager is
restarted, or for a long time.

``race_step`` marks each invocation with its attempt (``tests.workflows.mark``: the tests read
them with ``stack.invocations(tag)``) and ``<tag>:done`` when it finished, and returns the
attempt it ran as: the stored result says which attempt's outcome was kept.
"""

import os
import time

from tests.workflows import invocations, mark
from workflows_app.sdk import operation, workflow


@operation(name="race_step", max_retries=3, retry_interval=0.2)
def race_step(ctx, tag, until=None, seconds=0.0, timeout=60.0):
    """Marks ``tag``; on its first invocation only, waits until the file ``until`` exists (at most
    ``timeout`` s: a test that never creates it kills it first); sleeps ``seconds``; marks
    ``<tag>:done`` and returns ``{"tag", "attempt"}``."""
    first = invocations(tag) == 0
    mark(ctx, tag)
    deadline = time.monotonic() + timeout
    while first and until and not os.path.exists(until) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(seconds)
    mark(ctx, f"{tag}:done")
    return {"tag": tag, "attempt": ctx.attempt}


@workflow(name="race_held_behind")
def held_behind(ctx, agent, until):
    """``A`` on ``agent``, which runs until the file ``until`` exists on its first invocation;
    once the event ``go`` came, ``B`` on the same agent: its message is sent while ``A`` runs.
    The payload: what each returned."""
    a = ctx.execute("A", race_step, "A", until=until, agent=agent)
    ctx.await_event("go")
    b = ctx.execute("B", race_step, "B", agent=agent)
    ctx.set_payload({"A": a.wait(), "B": b.wait()})


@workflow(name="race_side_by_side")
def side_by_side(ctx, agent, n, seconds=0.0):
    """``n`` independent steps ``s<i>`` on ``agent``, each sleeping ``seconds``; the payload: their results."""
    g = ctx.graph()
    for i in range(n):
        g.add(f"s{i}", race_step, f"s{i}", seconds=seconds, agent=agent)
    ctx.set_payload({"results": g.run()})
