"""Workflows and operations of the integration tests (``SWITCHYARD_WORKFLOW_MODULES=tests.workflows``).

Every name carries the prefix ``it_`` so that nothing here collides with the bundled examples
(which the test process has loaded too). An operation that takes a ``tag`` appends one JSON
line per invocation to ``$SWITCHYARD_TEST_MARKERS/<tag>``: the tests count real invocations
from those files, independently of what the engine records.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from celery import chain, chord, group

from workflows_app.sdk import EventTimeout, NonRecoverableError, RecoverableError, StepFailed, operation, workflow

MARKERS_ENV = "SWITCHYARD_TEST_MARKERS"
#: Set by run_agent / run_manager in their processes (agents.worker.local.NAME_ENV).
AGENT_ENV = "SWITCHYARD_AGENT_NAME"


def here() -> str:
    """The agent (queue) this process serves."""
    return os.environ.get(AGENT_ENV, "")


def _marker_path(tag):
    directory = os.environ.get(MARKERS_ENV)
    return Path(directory) / str(tag).replace("/", "%2F") if directory else None


def invocations(tag) -> int:
    path = _marker_path(tag)
    try:
        return sum(1 for line in path.read_text().splitlines() if line.strip()) if path else 0
    except FileNotFoundError:
        return 0


def mark(ctx, tag, **extra) -> int:
    """Append this invocation to the marker file of ``tag``; returns how many there are now."""
    path = _marker_path(tag)
    if path is None:
        return 0
    line = json.dumps({"agent": here(), "pid": os.getpid(), "pgid": os.getpgrp(), "time": time.time(),
                       "attempt": getattr(ctx, "attempt", None), **extra})
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)
    return invocations(tag)


# --- operations --------------------------------------------------------------------------

@operation(name="it_step", max_retries=0)
def step(ctx, tag, sleep=0.0, fail=None, sleep_first_only=False, value=None, spawn=False, done=False, after=None):
    """Marks ``tag``, sleeps ``sleep`` s (only on the first invocation with
    ``sleep_first_only``), then fails as ``fail`` says ("nonrecoverable", "recoverable",
    "value_error") or returns ``value`` (default: the tag). With ``done`` it marks
    ``<tag>:done`` once it got to the end (so a test counts the invocations that finished).
    With ``after`` it first waits (up to 30 s) until the tag ``after`` has been marked: another
    step has started, whatever the load of the machine.

    With ``spawn`` the sleeping is done by a child process (in the operation's process group,
    its pid in the marker as ``child``), as an operation that runs a command would."""
    deadline = time.monotonic() + 30
    while after and not invocations(after) and time.monotonic() < deadline:
        time.sleep(0.02)
    sleeping = bool(sleep) and (invocations(tag) == 0 or not sleep_first_only)
    child = None
    if sleeping and spawn:
        child = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({float(sleep)})"])
    mark(ctx, tag, child=child.pid if child else None)
    if child is not None:
        child.wait()
    elif sleeping:
        time.sleep(sleep)
    if done:
        mark(ctx, f"{tag}:done")
    if fail == "nonrecoverable":
        raise NonRecoverableError(f"{tag} fails for good")
    if fail == "recoverable":
        raise RecoverableError(f"{tag} fails, retry me")
    if fail == "value_error":
        raise ValueError(f"{tag}: a plain ValueError")
    return tag if value is None else value


@operation(name="it_flaky", max_retries=3, retry_interval=0.2)
def flaky(ctx, tag, failures=2):
    """RecoverableError on its first ``failures`` invocations, then the invocation count."""
    count = mark(ctx, tag)
    if count <= failures:
        raise RecoverableError(f"{tag}: invocation {count} fails on purpose")
    return count


@operation(name="it_nonrecoverable", max_retries=3, retry_interval=0.2)
def nonrecoverable(ctx, tag):
    mark(ctx, tag)
    raise NonRecoverableError(f"{tag}: never retried")


@operation(name="it_value_error_retried", max_retries=2, retry_interval=0.2, retry_for=(ValueError,))
def value_error_retried(ctx, tag):
    mark(ctx, tag)
    raise ValueError(f"{tag}: retried, it is in retry_for")


@operation(name="it_value_error_plain", max_retries=2, retry_interval=0.2)
def value_error_plain(ctx, tag):
    mark(ctx, tag)
    raise ValueError(f"{tag}: not retried, no retry_for")


@operation(name="it_add")
def add(ctx, x, y=0):
    return x + y


@operation(name="it_mul")
def mul(ctx, x, y=1):
    return x * y


@operation(name="it_xsum")
def xsum(ctx, numbers):
    return sum(numbers)


@operation(name="it_collect")
def collect(ctx, items):
    """A chord body that returns what it got, to show its order."""
    return list(items)


@operation(name="it_slow_add")
def slow_add(ctx, x, y, seconds):
    time.sleep(seconds)
    return x + y


@operation(name="it_where")
def where(ctx, tag):
    """Marks ``tag`` and returns the agent it ran on."""
    mark(ctx, tag)
    return here()


# --- workflows ---------------------------------------------------------------------------

@workflow(name="it_cromwell")
def cromwell(ctx, agent_a, agent_b, a_seconds=2.0, b_seconds=0.3):
    """Cromwell's worked example: A and B independent, A1 after A, B1 after B; B
    fails for good while A runs (it waits until A has started: A's claim, which stores it
    ``started``, comes before B's failure however the two agents are scheduled). The failure
    mode comes from the execution."""
    g = ctx.graph()
    a = g.add("A", step, "A", sleep=a_seconds, agent=agent_a)
    b = g.add("B", step, "B", sleep=b_seconds, fail="nonrecoverable", agent=agent_b, after="A")
    g.add("A1", step, "A1", agent=agent_a, depends_on=[a])
    g.add("B1", step, "B1", agent=agent_b, depends_on=[b])
    return g.run()


def _canvas(case, agents, management_queue):
    h1, h2 = agents
    if case == "chain":
        return chain(add.s(1, 2), add.s(10)), 13
    if case == "immutable":
        return chain(add.s(1, 2), add.si(5, 5), add.s(100)), 110
    if case == "group":
        return group([add.s(i, i) for i in range(1, 5)]), [2, 4, 6, 8]
    if case == "chord":
        # The header members end in reverse order; the body still gets them in header order.
        header = [slow_add.s(1, 1, 1.2).set(queue=h1), slow_add.s(2, 2, 0.6).set(queue=h2), slow_add.s(3, 3, 0.0)]
        return chord(header, collect.s()), [2, 4, 6]
    if case == "nested":
        # A chain around a group: steps 0:it_add, 1.0:it_add, 1.1:it_mul, 2:it_xsum.
        return chain(add.s(1, 2), group(add.s(10), mul.s(10)), xsum.s()), 43
    if case == "deep":
        # 2 -> [2+1, (2*2)+1] -> 8: a chain inside a group inside a chain.
        return chain(add.s(1, 1), group(add.s(1), chain(mul.s(2), add.s(1))), xsum.s()), 8
    if case == "routing":
        return group(where.si("r-h1").set(queue=h1), where.si("r-h2").set(queue=h2), where.si("r-mgmt")), \
            [h1, h2, management_queue]
    raise ValueError(f"unknown canvas case {case!r}")


CANVAS_CASES = ("chain", "immutable", "group", "chord", "nested", "deep", "routing")


@workflow(name="it_canvas")
def canvas(ctx, case, agents, management_queue):
    """Runs one canvas of ``_canvas`` and keeps its result in the payload."""
    signature, _expected = _canvas(case, agents, management_queue)
    result = ctx.run_canvas(signature)
    ctx.set_payload({"result": result})


def canvas_expectation(case, agents, management_queue):
    return _canvas(case, agents, management_queue)[1]


@operation(name="it_limited", concurrency=2, max_retries=0)
def limited(ctx, tag, seconds=0.0):
    """At most two at once, whatever the number of agents and managers."""
    mark(ctx, tag)
    time.sleep(seconds)


@operation(name="it_rated", rate_limit="5/s", max_retries=0)
def rated(ctx, tag):
    """At most five sent in any second."""
    mark(ctx, tag)


@operation(name="it_per_account", concurrency=1, concurrency_key="account", rate_limit="100/s", rate_key="agent",
           max_retries=0)
def per_account(ctx, tag, account, seconds=0.0):
    """One at a time per account; a hundred a second per agent."""
    mark(ctx, tag, account=account)
    time.sleep(seconds)


@workflow(name="it_limited_fan_out")
def limited_fan_out(ctx, op, n, agents, seconds=0.0, accounts=None):
    """``n`` steps of the limited operation ``op`` side by side over the agents (each of
    ``accounts`` in turn, for it_per_account)."""
    g = ctx.graph()
    operation_ = {"it_limited": limited, "it_rated": rated, "it_per_account": per_account}[op]
    for i in range(n):
        kwargs = {"tag": op}
        if op != "it_rated":
            kwargs["seconds"] = seconds
        if accounts:
            kwargs["account"] = accounts[i % len(accounts)]
        g.add(f"s{i:03d}", operation_, agent=agents[i % len(agents)], **kwargs)
    ctx.set_payload({"count": len(g.run())})


@workflow(name="it_fan_out")
def fan_out(ctx, n, agents):
    """``n`` independent steps over the agents, then one step after all of them."""
    g = ctx.graph()
    members = [g.add(f"f{i:03d}", add, i, i, agent=agents[i % len(agents)]) for i in range(n)]
    g.add("fan-in", add, 0, 0, agent=agents[0], depends_on=members)
    results = g.run()
    ctx.set_payload({"count": sum(1 for name in members if name in results), "sum": sum(results[m] for m in members)})


@workflow(name="it_chain")
def long_chain(ctx, n, agents):
    """``n`` steps, each after the one before, alternating between the agents."""
    g = ctx.graph()
    previous = None
    for i in range(n):
        previous = g.add(f"c{i:02d}", add, i, 1, agent=agents[i % len(agents)],
                         depends_on=[previous] if previous else [])
    results = g.run()
    ctx.set_payload({"count": len(results), "last": results[f"c{n - 1:02d}"]})


@workflow(name="it_retries")
def retries(ctx, agent):
    """One step per retry rule, all independent (run it with continue_while_possible)."""
    g = ctx.graph()
    g.add("flaky", flaky, "flaky", failures=2, agent=agent)
    g.add("nonrecoverable", nonrecoverable, "nonrecoverable", agent=agent)
    g.add("retry_for", value_error_retried, "retry_for", agent=agent)
    g.add("plain", value_error_plain, "plain", agent=agent)
    return g.run()


@workflow(name="it_single")
def single(ctx, agent, tag="long", seconds=4.0, spawn=False, after=None):
    """One step (imperative ``ctx.execute``) that sleeps on its first invocation only (first
    waiting, with ``after``, until the tag ``after`` is marked: the test says when)."""
    result = ctx.await_execute("long", step, tag, sleep=seconds, sleep_first_only=True, spawn=spawn, agent=agent,
                               max_retries=3, after=after)
    ctx.set_payload({"result": result})


@workflow(name="it_fan_in")
def fan_in(ctx, agent, join_agent, members=3, seconds=2.0):
    """``members`` sleeping steps on ``agent``, then ``join`` after all of them."""
    g = ctx.graph()
    names = [g.add(f"m{i}", step, f"m{i}", sleep=seconds, sleep_first_only=True, agent=agent, max_retries=3)
             for i in range(members)]
    g.add("join", step, "join", agent=join_agent, depends_on=names)
    return g.run()


@workflow(name="it_duplicate")
def duplicate(ctx, agent, hold_agent, hold_seconds=5.0):
    """``once`` ends quickly while ``hold`` keeps the execution running."""
    g = ctx.graph()
    g.add("once", step, "once", agent=agent)
    g.add("hold", step, "hold", sleep=hold_seconds, agent=hold_agent)
    return g.run()


# --- stopping (tests/integration/test_stopping.py) ----------------------------------------

@operation(name="it_wait_cancel", max_retries=3, retry_interval=0.2)
def wait_cancel(ctx, tag, seconds=30.0, on_cancel="return", until=None):
    """Marks ``tag`` and runs for up to ``seconds``, looking at ``ctx.is_cancelled()`` every 0.1 s.
    Once cancelled: ``return`` returns "stopped" (marking ``<tag>-saw-cancel``), ``raise`` raises
    OperationCancelled (``ctx.raise_if_cancelled()``), ``recoverable`` raises RecoverableError,
    ``ignore`` carries on regardless. Returns "finished" when the time is up, or as soon as the
    file ``until`` exists (the test says when, however slow the machine)."""
    mark(ctx, tag)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (until and os.path.exists(until)):
        if on_cancel != "ignore" and ctx.is_cancelled():
            mark(ctx, f"{tag}-saw-cancel")
            if on_cancel == "raise":
                ctx.raise_if_cancelled()
            if on_cancel == "recoverable":
                raise RecoverableError(f"{tag}: cancelled, and says it may be retried")
            return "stopped"
        time.sleep(0.1)
    return "finished"


@operation(name="it_stubborn")
def stubborn(ctx, tag):
    """Ignores SIGTERM, starts ``sleep 1000`` (which inherits the ignored SIGTERM) and waits for it:
    only SIGKILL to the whole process group stops it. Marks ``tag`` with its pid and the child's."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen(["sleep", "1000"])
    mark(ctx, tag, child=child.pid)
    child.wait()
    return "the sleep ended"


@workflow(name="it_stoppable")
def stoppable(ctx, agent, on_cancel="return", seconds=30.0, until=None):
    """``first`` (quick), then ``running`` (it_wait_cancel), then ``after``."""
    g = ctx.graph()
    first = g.add("first", step, "first", agent=agent)
    running = g.add("running", wait_cancel, "running", seconds=seconds, on_cancel=on_cancel, until=until, agent=agent,
                    depends_on=[first])
    g.add("after", step, "after", agent=agent, depends_on=[running])
    return g.run()


@workflow(name="it_stubborn_wf")
def stubborn_workflow(ctx, agent):
    ctx.set_payload({"result": ctx.await_execute("stubborn", stubborn, "stubborn", agent=agent)})


@workflow(name="it_ends_while_running")
def ends_while_running(ctx, agent, how):
    """Starts ``busy`` (long) and never awaits it; awaits ``quick``; then ends as ``how`` says:
    "fail" (ctx.fail), "cancel" (ctx.cancel), "return", or "timeout" (awaits ``busy``, so the
    execution's own timeout ends it)."""
    busy = ctx.execute("busy", wait_cancel, "busy", seconds=60.0, on_cancel="ignore", agent=agent)
    ctx.await_execute("quick", step, "quick", sleep=1.0, agent=agent)
    if how == "fail":
        ctx.fail("the workflow gives up")
    if how == "cancel":
        ctx.cancel("the workflow cancels itself")
    if how == "timeout":
        busy.wait()


@workflow(name="it_stuck")
def stuck(ctx, seconds=1000.0):
    """Workflow code that never returns (a dispatcher only a kill can stop). Marks ``stuck``."""
    mark(ctx, "stuck")
    time.sleep(seconds)


# --- restart and resume (tests/integration/test_restart.py) ----------------------------------

@operation(name="it_needs_file", max_retries=0, retry_interval=0.2)
def needs_file(ctx, tag, path, recoverable=False):
    """Marks ``tag``; fails unless ``path`` exists — the cause a test fixes before it resumes —
    with RecoverableError when ``recoverable``, else NonRecoverableError."""
    mark(ctx, tag)
    if not os.path.exists(path):
        raise (RecoverableError if recoverable else NonRecoverableError)(f"{tag}: {path} is missing")
    return tag


@workflow(name="it_resumable")
def resumable(ctx, agent, path, recoverable=False, retries=0):
    """``before``, then ``needs`` (fails until ``path`` exists), then ``after``."""
    ctx.await_execute("before", step, "before", agent=agent)
    ctx.await_execute("needs", needs_file, "needs", path, recoverable=recoverable, agent=agent, max_retries=retries)
    ctx.set_payload({"after": ctx.await_execute("after", step, "after", agent=agent)})


@workflow(name="it_restart")
def restart_mix(ctx, agents, seconds=6.0, chain=8, manager_seconds=None, step_seconds=0.5, spawn=False, wide=0):
    """Work on every queue at once: ``slow-manager`` (no agent: it runs on a manager; it sleeps
    ``manager_seconds``, default ``seconds``) and ``slow-agent`` sleep on their first invocation; beside them a chain of ``chain``
    steps of ``step_seconds`` alternates between the two agents; ``join`` comes after all of it. Every step
    marks ``<tag>:done`` when it finishes. With ``spawn`` the two slow steps sleep in a child
    process (a command they run); ``wide`` more steps of ``step_seconds`` on the first agent
    queue up behind one another there."""
    g = ctx.graph()
    g.add("slow-manager", step, "slow-manager", sleep=seconds if manager_seconds is None else manager_seconds,
          sleep_first_only=True, done=True, max_retries=3, spawn=spawn)
    g.add("slow-agent", step, "slow-agent", sleep=seconds, sleep_first_only=True, done=True, agent=agents[0],
          max_retries=3, spawn=spawn)
    wide_steps = [g.add(f"w{i}", step, f"w{i}", sleep=step_seconds, done=True, agent=agents[0], max_retries=3)
                  for i in range(wide)]
    previous = None
    for i in range(chain):
        previous = g.add(f"c{i}", step, f"c{i}", sleep=step_seconds, done=True, agent=agents[i % 2], max_retries=3,
                         depends_on=[previous] if previous else [])
    g.add("join", step, "join", done=True, agent=agents[1], depends_on=["slow-manager", "slow-agent", previous, *wide_steps])
    return g.run()


@workflow(name="it_outage")
def outage(ctx, agent, prefix, seconds=3.0, wide=2):
    """Work of each kind in flight when the database goes away (tests/integration/test_db_outage.py):
    ``wide`` steps sleeping ``seconds`` on ``agent`` and one on a manager (no agent), tagged
    ``<prefix>:<name>``; once all of them are done, an imperative step on ``agent`` that returns
    how many there were."""
    g = ctx.graph()
    for i in range(wide):
        g.add(f"a{i}", step, f"{prefix}:a{i}", sleep=seconds, agent=agent, max_retries=3)
    g.add("m", step, f"{prefix}:m", sleep=seconds, max_retries=3)
    results = g.run()
    after = ctx.await_execute("after", step, f"{prefix}:after", value=len(results), agent=agent, max_retries=3)
    ctx.set_payload({"results": sorted(results.values()), "after": after})


# --- waits: events, timers, cancelling a step (tests/engine/test_context_waits.py) -------------------


@workflow(name="it_events")
def events(ctx, waits):
    """``waits``: a list of ``[name, timeout]``; each is awaited in turn and what it gave —
    the payload, or ``"timeout"`` — is appended to the payload's ``got``."""
    got = []
    for name, timeout in waits:
        try:
            got.append(ctx.await_event(name, timeout=timeout))
        except EventTimeout:
            got.append("timeout")
    ctx.set_payload({"got": got})


@workflow(name="it_sleep")
def sleeper(ctx, seconds):
    ctx.sleep(seconds)
    ctx.set_payload({"slept": seconds})


@workflow(name="it_cancel_step")
def cancel_one_step(ctx, agent, after_first=False, use_ctx=False):
    """``victim`` (after ``first`` when ``after_first``, so it stays pending) and ``then`` after
    it; on the event ``cancel`` the workflow cancels ``victim`` and records what each became."""
    first = ctx.execute("first", step, "first", sleep=30.0, agent=agent) if after_first else None
    victim = ctx.execute("victim", step, "victim", sleep=30.0, agent=agent, depends_on=[first] if first else ())
    then = ctx.execute("then", step, "then", agent=agent, depends_on=[victim])
    ctx.await_event("cancel")
    cancelled_now = ctx.cancel_step(victim) if use_ctx else victim.cancel()
    outcome = {"cancelled_now": cancelled_now}
    for handle in (victim, then):
        try:
            handle.wait()
            outcome[handle.name] = "ran"
        except StepFailed:
            outcome[handle.name] = handle.state.value
    ctx.set_payload(outcome)


@workflow(name="it_none_of")
def none_of_events(ctx, timeout=None):
    """``none_of`` over two event waits; the answer goes to the payload."""
    yes, also = ctx.wait_for_event("yes", timeout=timeout), ctx.wait_for_event("also-yes", timeout=timeout)
    ctx.set_payload({"none": ctx.none_of(yes, also).wait(), "states": [yes.state.value, also.state.value]})


@workflow(name="it_bad_wait")
def bad_wait(ctx, case):
    """A wait asked with bad input: the execution fails with a clear error."""
    if case == "name":
        ctx.await_event(42)
    elif case == "timeout":
        ctx.await_event("x", timeout=-1)
    elif case == "sleep":
        ctx.sleep("soon")
    elif case == "cancel":
        ctx.cancel_step(3.5)


# --- a step's failure in workflow code (tests/integration/test_failures.py) ---------------------

SAGA_STYLES = ("execute", "graph", "canvas")


@workflow(name="it_saga")
def saga(ctx, agent, style, pack_seconds=2.0, spawn=False, reraise=False, tags=""):
    """An order: ``reserve``; then ``pack`` (slow) beside ``charge`` (fails for good, once pack
    has started); then
    ``ship`` after both — as ``ctx.execute`` calls, a graph or a Celery canvas (``style``).
    The charge's failure is caught: the workflow refunds (``refund``, a new step) and records
    what it saw; with ``reraise`` it records it and lets the StepFailed go on. Each step marks
    its name after the prefix ``tags``."""
    try:
        if style == "execute":
            ctx.await_execute("reserve", step, tags + "reserve", agent=agent)
            pack = ctx.execute("pack", step, tags + "pack", sleep=pack_seconds, spawn=spawn, agent=agent)
            charge = ctx.execute("charge", step, tags + "charge", fail="nonrecoverable", after=tags + "pack", agent=agent)
            pack.wait()
            charge.wait()
            ctx.await_execute("ship", step, tags + "ship", agent=agent)
        elif style == "graph":
            g = ctx.graph()
            reserve = g.add("reserve", step, tags + "reserve", agent=agent)
            pack = g.add("pack", step, tags + "pack", sleep=pack_seconds, spawn=spawn, agent=agent, depends_on=[reserve])
            charge = g.add("charge", step, tags + "charge", fail="nonrecoverable", after=tags + "pack", agent=agent,
                           depends_on=[reserve])
            g.add("ship", step, tags + "ship", agent=agent, depends_on=[pack, charge])
            g.run()
        else:
            ctx.run_canvas(chain(
                step.si(tags + "reserve").set(step="reserve", queue=agent),
                group(step.si(tags + "pack", sleep=pack_seconds, spawn=spawn).set(step="pack", queue=agent),
                      step.si(tags + "charge", fail="nonrecoverable", after=tags + "pack").set(step="charge", queue=agent)),
                step.si(tags + "ship").set(step="ship", queue=agent)))
    except StepFailed as failure:
        saw = {"failed": failure.cause or failure.step, "error": failure.error.get("type")}
        if reraise:
            ctx.set_payload({"saw": saw})
            raise
        ctx.set_payload({"saw": saw, "refund": ctx.await_execute("refund", step, tags + "refund", agent=agent)})
        return
    ctx.set_payload({"shipped": True})


@workflow(name="it_buggy", on_unhandled="retry")
def buggy(ctx, agent, fixed_path):
    """``before``; then a bug in the workflow code itself until ``fixed_path`` exists (a test
    "deploys the fix" by creating it); then ``after``."""
    ctx.await_execute("before", step, "before", agent=agent)
    if not os.path.exists(fixed_path):
        raise RuntimeError("a bug in the workflow code: the fix is not deployed yet")
    ctx.set_payload({"after": ctx.await_execute("after", step, "after", agent=agent)})


@workflow(name="it_changing")
def changing(ctx, agent, changed_path, change):
    """Step ``x``, then the event ``go``. Once ``changed_path`` exists, the code asks for ``x``
    differently — another operation, or other arguments (``change``) — as a careless deploy would."""
    changed = os.path.exists(changed_path)
    if changed and change == "operation":
        ctx.await_execute("x", where, "x", agent=agent)
    elif changed and change == "arguments":
        ctx.await_execute("x", step, "x", value=2, agent=agent)
    else:
        ctx.await_execute("x", step, "x", value=1, agent=agent)
    ctx.await_event("go")
    ctx.set_payload({"done": True})



@workflow(name="it_event_first")
def event_first(ctx, agent):
    """Starts ``a`` and, before it waits on it, waits for the event ``go``."""
    a = ctx.execute("a", step, "a", agent=agent)
    ctx.await_event("go")
    ctx.set_payload({"a": a.wait()})


@workflow(name="it_swallows_nondeterminism")
def swallows_nondeterminism(ctx, agent, changed_path):
    """Asks for ``x`` with other arguments once ``changed_path`` exists, and catches everything."""
    try:
        ctx.execute("x", step, "x", value=2 if os.path.exists(changed_path) else 1, agent=agent)
    except Exception:  # noqa: BLE001 — what a careless workflow does; the guard must still hold
        pass
    ctx.await_event("go")


@workflow(name="it_tuple_args")
def tuple_args(ctx, agent):
    """A step whose argument is a tuple: stored as a JSON list, asked again as a tuple."""
    ctx.set_payload({"t": ctx.await_execute("t", step, "t", value=(1, 2), agent=agent)})


# --- canvases compared with plain Celery (tests/canvas_workflows.py) -------------------------
from tests import canvas_workflows  # noqa: E402,F401  (registers its workflows, operations and Celery tasks)


# --- live runs (tests/engine/test_live_runs.py) ---------------------------------------------------

#: tag -> how many step calls the function made, in this process: once per step when a live run
#: goes on, and again for every earlier step each time a pass replays from the top.
CALLS = {}


@workflow(name="it_counted_chain")
def counted_chain(ctx, n, tag, agent="a1"):
    """``n`` sequential ``it_add`` steps, each adding one to the one before; the payload keeps
    the last result."""
    total = 0
    for i in range(n):
        CALLS[tag] = CALLS.get(tag, 0) + 1
        total = ctx.await_execute(f"s{i}", add, total, 1, agent=agent)
    ctx.set_payload({"total": total})


@workflow(name="it_cleanup_after_event")
def cleanup_after_event(ctx):
    """Waits for ``go``; whatever happens, stores a ``cleanup`` step after the wait."""
    try:
        ctx.set_payload({"go": ctx.await_event("go")})
    finally:
        ctx.execute("cleanup", add, 1, agent="a1")


# --- child workflows (tests/engine/test_child_steps.py, tests/integration/test_child_trees.py) ---------------

@workflow(name="it_child")
def child_workflow(ctx, agent, other_agent, tag, fail=False, seconds=0.0):
    """Two steps on two agents: ``first`` on ``agent`` (sleeps ``seconds``), then ``second`` on
    ``other_agent``, which fails for good with ``fail``. Its payload: the tag and both results."""
    first = ctx.await_execute("first", step, f"{tag}-first", sleep=seconds, agent=agent)
    second = ctx.await_execute("second", step, f"{tag}-second", fail="nonrecoverable" if fail else None, agent=other_agent)
    ctx.set_payload({"tag": tag, "results": [first, second]})


@workflow(name="it_parent")
def parent_workflow(ctx, agent, other_agent, children=3, failing=(), catch=False, seconds=0.0, prefix=""):
    """``children`` children (it_child, tags ``<prefix>c<i>``) started at once, then awaited in
    order; the payload combines theirs. A child in ``failing`` fails; with ``catch`` the parent
    compensates it with the step ``undo-<child>`` (tag ``<prefix>undo-<child>``) and goes on."""
    handles = [ctx.execute_workflow(f"child{i}", child_workflow, agent=agent, other_agent=other_agent,
                                    tag=f"{prefix}c{i}", fail=i in failing, seconds=seconds) for i in range(children)]
    tags = []
    for handle in handles:
        try:
            tags.append(handle.wait()["tag"])
        except StepFailed:
            if not catch:
                raise
            ctx.await_execute(f"undo-{handle.name}", step, f"{prefix}undo-{handle.name}", agent=agent)
            tags.append(None)
    ctx.set_payload({"children": tags})


@workflow(name="it_tree")
def tree_workflow(ctx, agent, depth, leaf="step", tag="leaf", fanout=1):
    """A tree of executions ``depth`` deep, ``fanout`` children each; each leaf runs ``leaf``:
    "step" (quick), "wait" (it_wait_cancel for 60 s) or "stubborn" (ignores SIGTERM). The
    payload counts the leaves below."""
    if depth > 1:
        handles = [ctx.execute_workflow(f"sub{i}", "it_tree", agent=agent, depth=depth - 1, leaf=leaf,
                                        tag=f"{tag}.{i}", fanout=fanout) for i in range(fanout)]
        ctx.set_payload({"leaves": sum(result["leaves"] for result in ctx.all_of(*handles).wait())})
        return
    if leaf == "stubborn":
        ctx.await_execute("leaf", stubborn, tag, agent=agent)
    elif leaf == "wait":
        ctx.await_execute("leaf", wait_cancel, tag, seconds=60.0, agent=agent)
    else:
        ctx.await_execute("leaf", step, tag, agent=agent)
    ctx.set_payload({"leaves": 1})


@workflow(name="it_child_left_running")
def child_left_running(ctx, agent, how="fail", deployment_id=None):
    """Starts the child ``sub`` (a leaf of it_tree that waits 60 s) and never awaits it; awaits
    ``quick``; then ends as ``how`` says: "fail" (ctx.fail), "cancel" (ctx.cancel) or "return"."""
    ctx.execute_workflow("sub", "it_tree", agent=agent, depth=1, leaf="wait", tag="left", deployment_id=deployment_id)
    ctx.await_execute("quick", step, "quick", agent=agent)
    if how == "fail":
        ctx.fail("the parent gives up")
    if how == "cancel":
        ctx.cancel("the parent cancels itself")


@workflow(name="it_bad_child")
def bad_child(ctx, kind):
    """Asks for a child of an unknown workflow ("unknown") or with parameters it does not take."""
    if kind == "unknown":
        ctx.await_workflow("sub", "it_nope")
    else:
        ctx.await_workflow("sub", "it_tree", agent="a1", colour="red")


@workflow(name="it_parent_of")
def parent_of(ctx, workflow, params, timeout=None):
    """One child of ``workflow`` with ``params`` (and the child's ``timeout``); its payload is the child's."""
    ctx.set_payload(ctx.await_workflow("child", workflow, timeout=timeout, **params))


# --- typed parameters (tests/typed_workflows.py): a child of it_parent_of checked as every start --
from tests import typed_workflows  # noqa: E402

typed = workflow(name="it_typed")(typed_workflows.typed)


# --- values that may not be stored (the one value check) ------------------------------------------

#: Text with a lone surrogate and a NUL: stored as text (an error), it is cleaned, not refused.
UNSTORABLE_TEXT = os.fsdecode(b"x-\xff") + " \x00 end"


def bad_value(kind):
    """A value no database or page can hold, of ``kind``; "ok" is one that can."""
    if kind == "surrogate":
        return {"file": os.fsdecode(b"report-\xff.csv")}  # what os.listdir gives for a name not in UTF-8
    if kind == "nul":
        return {"text": "a\x00b"}
    if kind == "nan":
        return {"ratio": float("nan")}
    if kind == "deep":
        value = []
        for _ in range(900):
            value = [value]
        return value
    if kind == "large":
        return {"blob": "x" * (3 * 1024 * 1024)}
    return {"fine": True}


@operation(name="it_returns", max_retries=3, retry_interval=0.2)
def returns(ctx, kind, *extra):
    """Returns ``bad_value(kind)``; with ``kind`` "error" raises an error quoting a lone surrogate
    and a NUL (retryable: the error itself must be stored every time)."""
    if kind == "error":
        raise RecoverableError("cannot read " + UNSTORABLE_TEXT)
    if kind == "log":
        ctx.log("a log line with data that cannot be stored", data=bad_value("surrogate"))
    return bad_value(kind)


@workflow(name="it_bad_value")
def bad_value_workflow(ctx, where, kind, agent=None):
    """Meets ``bad_value(kind)`` ``where``: "result" (an operation returns it), "payload" (the
    workflow sets it), "arguments" (the workflow passes it to a step), "error" (an operation's
    error quotes it), "reason" (the workflow fails with a reason quoting it), "log" (ctx.log)."""
    if where == "result":
        ctx.await_execute("produce", returns, kind, agent=agent)
    elif where == "payload":
        ctx.set_payload({"value": bad_value(kind)})
    elif where == "arguments":
        ctx.await_execute("produce", returns, "ok", bad_value(kind), agent=agent)
    elif where in ("error", "log"):
        ctx.await_execute("produce", returns, where, agent=agent)
    elif where == "reason":
        ctx.fail("gave up on " + UNSTORABLE_TEXT)
    ctx.set_payload({"went_on": True})


# --- the execution page's picture: the order of imperative code ----------------------------

@workflow(name="it_packs")
def packs(ctx, agent, parallel=False, fail="", seconds=0.0):
    """``fetch``, then three ``pack-*`` steps, then ``ship``, each with ``ctx.execute``: the packs
    one after the other (each awaited before the next is asked for), or all three at once then
    awaited together (``parallel``). The pack named ``fail`` fails for good; the workflow catches
    its ``StepFailed`` and goes on. No step depends on another: only the code orders them."""
    ctx.await_execute("fetch", step, "fetch", agent=agent)
    names = ["pack-1", "pack-2", "pack-3"]

    def pack(name):
        return ctx.execute(name, step, name, sleep=seconds, fail="nonrecoverable" if name == fail else None, agent=agent)

    handles = [pack(name) for name in names] if parallel else []
    packed = []
    for i, name in enumerate(names):
        try:
            packed.append((handles[i] if parallel else pack(name)).wait())
        except StepFailed:
            packed.append(None)
    ctx.await_execute("ship", step, "ship", agent=agent)
    ctx.set_payload({"packed": packed})


# --- Flower's task states (tests/integration/test_flower.py) ---------------------------------

@workflow(name="it_outcomes")
def outcomes(ctx, prefix, agent=None):
    """``it_retries``' four steps, their marker tags prefixed with ``prefix`` so that two of these
    executions may run at once, on ``agent`` (None: the managers' queue). Run it with
    continue_while_possible."""
    g = ctx.graph()
    g.add("flaky", flaky, f"{prefix}flaky", failures=2, agent=agent)
    g.add("nonrecoverable", nonrecoverable, f"{prefix}nonrecoverable", agent=agent)
    g.add("retry_for", value_error_retried, f"{prefix}retry_for", agent=agent)
    g.add("plain", value_error_plain, f"{prefix}plain", agent=agent)
    return g.run()


# --- pool processes that go under an operation (tests/integration/test_pool_deaths.py) -------

@operation(name="it_dies", max_retries=0, retry_interval=0.2)
def dies(ctx, tag, how):
    """Marks ``tag`` (the marker holds this pool process' pid), then, on its first invocation
    only, ends its pool process as ``how`` says: "exit" calls ``exit(1)``, "system_exit" raises
    ``SystemExit``, "keyboard_interrupt" raises ``KeyboardInterrupt``, "os_exit" calls
    ``os._exit(3)``, "sigkill" waits (up to 60 s) for the test to SIGKILL it. A later invocation
    returns ``tag``."""
    if mark(ctx, tag) > 1:
        return tag
    if how == "exit":
        exit(1)  # noqa: PLR1722 — the builtin, as an operation's code might call it
    if how == "system_exit":
        raise SystemExit
    if how == "keyboard_interrupt":
        raise KeyboardInterrupt
    if how == "os_exit":
        os._exit(3)
    if how == "sigkill":
        time.sleep(60)
        return "never killed"
    raise ValueError(f"unknown way to die {how!r}")


@workflow(name="it_pool_death")
def pool_death(ctx, agent, how):
    """Two independent steps of ``it_dies`` that end their first invocation as ``how`` says:
    ``retried`` may be retried once, ``final`` never (run it with continue_while_possible)."""
    g = ctx.graph()
    g.add("retried", dies, "retried", how, agent=agent, max_retries=1)
    g.add("final", dies, "final", how, agent=agent, max_retries=0)
    return g.run()
