"""Workflows and operations of the soak (``tests/integration/test_soak.py``), loaded beside
``tests.workflows`` (``SWITCHYARD_WORKFLOW_MODULES=tests.workflows,tests.soak_workflows``).

Every operation here records each of its invocations in the marker file of the tag
``soak-<operation id>`` (``tests.workflows.mark``: agent, pid, process group, attempt) with the
start time of its process, and the end of the invocation — however it ended, short of being
killed — under ``soak-<operation id>:end``. The soak reads them back to tell, independently of
what the engine recorded, which attempts really ran, which ran twice and which processes may
still run.

Each workflow computes from its parameter ``n`` a result the test knows in advance
(``expected_payload``). Operations allow many retries: under chaos a lost attempt is a
retryable failure and counts as one, and a soak must never run out of them.
"""

import contextlib
import os
import subprocess
import time

import psutil
from celery import chain, chord, group
from django.db import InterfaceError, OperationalError, connection

from tests.workflows import invocations, mark
from workflows_app.sdk import RecoverableError, operation, workflow

#: Retries of every soak operation (lost attempts included).
MAX_RETRIES = 50
RETRY_INTERVAL = 0.2
#: What the designed retryable failure says (the soak tells it from a lost attempt by it).
DESIGNED_FAILURE = "fails once on purpose (soak)"


def tag_of(operation_id) -> str:
    return f"soak-{operation_id}"


def end_tag_of(operation_id) -> str:
    return f"{tag_of(operation_id)}:end"


def _created(pid) -> float:
    return psutil.Process(pid).create_time()


@contextlib.contextmanager
def invocation(ctx, **extra):
    """Mark the invocation's start (with this process' start time, so the soak can tell this
    process from a later one with the same pid) and its end, whichever way it ends."""
    mark(ctx, tag_of(ctx.operation_id), created=_created(os.getpid()), **extra)
    try:
        yield
    finally:
        mark(ctx, end_tag_of(ctx.operation_id))


# --- operations --------------------------------------------------------------------------

@operation(name="soak_add", max_retries=MAX_RETRIES, retry_interval=RETRY_INTERVAL)
def soak_add(ctx, x, y=0, seconds=0.0):
    with invocation(ctx):
        time.sleep(seconds)
        return x + y


@operation(name="soak_mul", max_retries=MAX_RETRIES, retry_interval=RETRY_INTERVAL)
def soak_mul(ctx, x, y=1, seconds=0.0):
    with invocation(ctx):
        time.sleep(seconds)
        return x * y


@operation(name="soak_sum", max_retries=MAX_RETRIES, retry_interval=RETRY_INTERVAL)
def soak_sum(ctx, numbers, seconds=0.0):
    with invocation(ctx):
        time.sleep(seconds)
        return sum(numbers)


@operation(name="soak_flaky", max_retries=MAX_RETRIES, retry_interval=RETRY_INTERVAL)
def soak_flaky(ctx, value, seconds=0.0):
    """Fails retryably on its first invocation (a RecoverableError), then returns ``value``."""
    with invocation(ctx):
        time.sleep(seconds)
        if invocations(tag_of(ctx.operation_id)) == 1:
            raise RecoverableError(f"{ctx.name}: {DESIGNED_FAILURE}")
        return value


@operation(name="soak_hold", max_retries=MAX_RETRIES, retry_interval=RETRY_INTERVAL)
def soak_hold(ctx, seconds=90.0):
    """Runs until its execution is cancelled (then raises OperationCancelled), at most
    ``seconds``. It looks every 0.2 s, and rides out a database that does not answer."""
    with invocation(ctx):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                ctx.raise_if_cancelled()
            except (OperationalError, InterfaceError):
                connection.close()  # the database restarts: look again on the next turn
            time.sleep(0.2)
        return "held"


@operation(name="soak_stubborn", max_retries=MAX_RETRIES, retry_interval=RETRY_INTERVAL)
def soak_stubborn(ctx, seconds=600):
    """Runs a command (``sleep``, in the operation's process group) and waits for it: only a
    kill of the whole process group ends it early. The command's pid is in the marker."""
    child = subprocess.Popen(["sleep", str(seconds)])
    with invocation(ctx, child=child.pid, child_created=_created(child.pid)):
        child.wait()
        return "the command ended"


# --- workflows, one per shape --------------------------------------------------------------

@workflow(name="soak_graph")
def soak_graph(ctx, n, agents, seconds=0.0):
    """A diamond stored as a graph: ``a`` and ``b`` on the two agents and ``c`` on a manager,
    then ``d`` after the three of them."""
    g = ctx.graph()
    a = g.add("a", soak_add, n, 1, seconds=seconds, agent=agents[0])
    b = g.add("b", soak_add, n, 2, seconds=seconds, agent=agents[1])
    c = g.add("c", soak_add, n, 3, seconds=seconds)
    g.add("d", soak_add, n, 4, seconds=seconds, agent=agents[n % 2], depends_on=[a, b, c])
    ctx.set_payload({"result": g.run()})


@workflow(name="soak_canvas")
def soak_canvas(ctx, n, agents, seconds=0.0):
    """Two Celery canvases: a chain — a step, a group of three taking its result (one of them on
    a manager), a step adding up theirs — then a chord whose body adds up its header's results."""
    h1, h2 = agents
    canvas = chain(
        soak_add.s(n, 1, seconds=seconds).set(queue=h1),
        group(soak_add.s(10, seconds=seconds).set(queue=h2), soak_mul.s(2, seconds=seconds).set(queue=h1),
              soak_add.s(0, seconds=seconds)),
        soak_sum.s(seconds=seconds).set(queue=h2),
    )
    # A second canvas of the same execution: its steps are named, so as not to take the names
    # the first one's positions gave.
    header = [soak_add.si(n, 5).set(queue=h1, step="chord-add"), soak_mul.si(n, 3).set(queue=h2, step="chord-mul")]
    fan_in = chord(header, soak_sum.s().set(queue=h1, step="chord-sum"))
    ctx.set_payload({"chain": ctx.run_canvas(canvas), "chord": ctx.run_canvas(fan_in)})


@workflow(name="soak_steps")
def soak_steps(ctx, n, agents, seconds=0.0):
    """Imperative steps: one awaited, two in parallel (all_of), then their total on a manager."""
    first = ctx.await_execute("first", soak_add, n, 1, seconds=seconds, agent=agents[0])
    left = ctx.execute("left", soak_add, first, 10, seconds=seconds, agent=agents[1])
    right = ctx.execute("right", soak_mul, first, 3, seconds=seconds, agent=agents[0])
    ctx.all_of(left, right).wait()
    total = ctx.await_execute("total", soak_add, left.result(), right.result(), seconds=seconds)
    ctx.set_payload({"result": total})


@workflow(name="soak_event")
def soak_event(ctx, n, agent, seconds=0.0):
    """A step, then a wait for the event ``go`` (the test sends ``{"k": ...}``), then a step
    that adds what the event carried."""
    before = ctx.await_execute("before", soak_add, n, 1, seconds=seconds, agent=agent)
    got = ctx.await_event("go")
    after = ctx.await_execute("after", soak_add, before, got["k"], seconds=seconds, agent=agent)
    ctx.set_payload({"result": after, "got": got})


@workflow(name="soak_retry")
def soak_retry(ctx, n, agents, seconds=0.0):
    """A graph whose ``flaky`` step fails once retryably (RecoverableError), beside ``steady``;
    ``join`` after both."""
    g = ctx.graph()
    flaky = g.add("flaky", soak_flaky, n, seconds=seconds, agent=agents[n % 2])
    steady = g.add("steady", soak_add, n, 1, seconds=seconds, agent=agents[(n + 1) % 2])
    g.add("join", soak_add, n, 2, agent=agents[0], depends_on=[flaky, steady])
    ctx.set_payload({"result": g.run()})


@workflow(name="soak_cancel")
def soak_cancel(ctx, n, agent):
    """A step, then ``hold`` — which runs until the test cancels the execution — then a step
    that never runs."""
    ctx.await_execute("first", soak_add, n, 1, agent=agent)
    ctx.await_execute("hold", soak_hold, agent=agent)
    ctx.await_execute("never", soak_add, n, 2, agent=agent)


@workflow(name="soak_kill")
def soak_kill(ctx, n, agent):
    """A step, then ``stubborn`` — a command that runs until the test kills the execution."""
    ctx.await_execute("first", soak_add, n, 1, agent=agent)
    ctx.await_execute("stubborn", soak_stubborn, agent=agent)


def expected_payload(shape, n, k=None):
    """The payload an execution of ``shape`` with parameter ``n`` (and event payload ``k``)
    completes with; None for the shapes the test stops (they end cancelled)."""
    if shape == "graph":
        return {"result": {"a": n + 1, "b": n + 2, "c": n + 3, "d": n + 4}}
    if shape == "canvas":
        first = n + 1
        return {"chain": (first + 10) + first * 2 + first, "chord": (n + 5) + n * 3}
    if shape == "steps":
        first = n + 1
        return {"result": (first + 10) + first * 3}
    if shape == "event":
        return {"result": n + 1 + k, "got": {"k": k}}
    if shape == "retry":
        return {"result": {"flaky": n, "steady": n + 1, "join": n + 2}}
    return None
