"""The workflow whose timeline the browser test watches (tests/integration/test_browser_timeline.py),
with ``tests.workflows`` loaded too (its operations)."""

from tests.workflows import add, flaky, slow_add, step
from workflows_app.sdk import workflow


@workflow(name="it_timeline")
def timeline_workflow(ctx, agent, absent_agent, members=10, long_seconds=12.0):
    """``fetch``, then side by side: ``flaky`` (two attempts fail, the third succeeds), ``long``,
    a fan-out ``part-0`` … and ``stuck``, sent to an agent nobody serves (it waits until the
    execution is stopped); ``ship`` after all of them. Each runs an operation of its own, but the
    members of the fan-out: they alone are siblings (``admin.picture.groups``)."""
    g = ctx.graph()
    fetch = g.add("fetch", step, "fetch", sleep=0.3, agent=agent)
    after = [g.add("flaky", flaky, "flaky", failures=2, agent=agent, depends_on=[fetch]),
             g.add("long", slow_add, 1, 2, long_seconds, agent=agent, depends_on=[fetch])]
    after += [g.add(f"part-{i}", step, f"part-{i}", sleep=0.3, agent=agent, depends_on=[fetch]) for i in range(members)]
    after.append(g.add("stuck", add, 1, 2, agent=absent_agent, depends_on=[fetch]))
    g.add("ship", step, "ship", agent=agent, depends_on=after)
    return g.run()
