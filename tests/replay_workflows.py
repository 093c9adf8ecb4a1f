"""Workflows whose code changes between deploys: for ``ctx.patched`` and the replay check
(tests/engine/test_patched.py, tests/engine/test_replay_check.py,
tests/commands/test_replay_commands.py, tests/integration/test_code_change.py).

Which version of the code runs is read from :data:`CODE_VERSION_ENV` each time the function
runs: a test "deploys" a version by setting it (and dropping the live runs a process keeps, as
a new process has none); a manager started with it set runs that version.
"""

import os

from celery import chain

from workflows_app.sdk import operation, workflow

#: The environment variable that names the version of the code below ("1" when unset).
CODE_VERSION_ENV = "SWITCHYARD_TEST_CODE_VERSION"


def version() -> str:
    return os.environ.get(CODE_VERSION_ENV, "1")


@operation(name="rc_echo", max_retries=0)
def echo(ctx, tag):
    return tag


@workflow(name="rc_deploy")
def deploy(ctx):
    """Version 1: step ``a``, the event ``go``, step ``b``. The payload lists the steps' results.

    - 2: the change done right: ``c`` before the event and ``d`` after it, each behind
      ``ctx.patched``;
    - 3: ``c`` before the event, unguarded;
    - 4: ``b`` asked with other arguments;
    - 5: a new step ``e`` after ``b``;
    - 6: returns before asking for anything;
    - 7: raises before asking for anything;
    - 8: raises after ``b``;
    - 9: version 2 with both patches retired (``c`` and ``d`` asked unconditionally), and a new
      step ``e`` after ``b`` behind ``ctx.patched("after-b")``."""
    v = version()
    if v == "6":
        return
    if v == "7":
        raise RuntimeError("a bug in the new code")
    ran = [ctx.await_execute("a", echo, "a")]
    if (v == "2" and ctx.patched("before-go")) or v in ("3", "9"):
        ran.append(ctx.await_execute("c", echo, "c"))
    go = ctx.await_event("go")
    if (v == "2" and ctx.patched("after-go")) or v == "9":
        ran.append(ctx.await_execute("d", echo, "d"))
    ran.append(ctx.await_execute("b", echo, "B" if v == "4" else "b"))
    if v == "5" or (v == "9" and ctx.patched("after-b")):
        ran.append(ctx.await_execute("e", echo, "e"))
    if v == "8":
        raise RuntimeError("a bug after the last step")
    ctx.set_payload({"ran": ran, "go": go})


@workflow(name="rc_twice")
def twice(ctx):
    """Steps ``a`` and ``b``, then the event ``go``. From version 2 it asks ``ctx.patched("x")``
    before ``a`` and again after ``b``, and keeps both answers in its payload."""
    first = ctx.patched("x") if version() == "2" else None
    ctx.await_execute("a", echo, "a")
    ctx.await_execute("b", echo, "b")
    second = ctx.patched("x") if version() == "2" else None
    ctx.set_payload({"first": first, "second": second})
    ctx.await_event("go")


@workflow(name="rc_first_thing")
def first_thing(ctx):
    """Runs ``a``; from version 2 it asks ``ctx.patched("first")`` before anything else."""
    answer = ctx.patched("first") if version() == "2" else None
    ctx.set_payload({"answer": answer, "a": ctx.await_execute("a", echo, "a")})


@workflow(name="rc_bad_patch")
def bad_patch(ctx, case):
    """``ctx.patched`` with a change id that is not one (``case`` names which)."""
    change_id = {"number": 42, "none": None, "empty": "", "blank": "   ", "long": "x" * 201, "nul": "a\x00b"}[case]
    ctx.patched(change_id)


@workflow(name="rc_graph")
def graph_and_canvas(ctx):
    """A graph — ``p1`` and ``p2``, then ``join`` after both — and then a canvas, a chain of two
    ``rc_echo``. Version 2 asks for ``p2`` with another argument; version 3 for the canvas' first
    step with another one."""
    v = version()
    g = ctx.graph()
    p1 = g.add("p1", echo, "p1")
    p2 = g.add("p2", echo, "P2" if v == "2" else "p2")
    g.add("join", echo, "join", depends_on=[p1, p2])
    results = g.run()
    piped = ctx.run_canvas(chain(echo.si("Y" if v == "3" else "y"), echo.s()))
    ctx.set_payload({"graph": results, "canvas": piped})
