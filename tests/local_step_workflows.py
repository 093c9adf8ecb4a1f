"""Workflows with local steps, for the harness' tests and the integration tests."""

import os
import time
from pathlib import Path

from celery import chain

from workflows_app.sdk import RecoverableError, operation, workflow


@operation(local=True)
def local_add(ctx, a, b):
    return a + b


@operation
def remote_double(ctx, x):
    return 2 * x


@operation(local=True, max_retries=2, retry_interval=0)
def local_sleep(ctx, seconds, marker_dir=None):
    """Sleeps ``seconds`` (interruptible), noting each attempt in ``marker_dir`` (one file each)."""
    if marker_dir:
        Path(marker_dir, f"{ctx.name}.{ctx.attempt}.{os.getpid()}").touch()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if ctx.is_cancelled():
            ctx.raise_if_cancelled()
        time.sleep(0.05)
    return {"slept": seconds, "attempt": ctx.attempt}


@operation(local=True, max_retries=1, retry_interval=0)
def local_flaky(ctx):
    if ctx.attempt == 1:
        raise RecoverableError("not yet")
    ctx.log("second time lucky", attempt=ctx.attempt)
    return ctx.attempt


@workflow
def local_chain(ctx, n=5, marker_dir=None):
    total = 0
    for i in range(n):
        if marker_dir:
            Path(marker_dir, f"reached-{i}").touch()
        total = ctx.await_execute(f"add-{i}", local_add, total, i)
    ctx.set_payload({"total": total})


@workflow
def local_mixed(ctx, agent=None):
    """Local, on an agent (or the managers' queue), local again."""
    a = ctx.await_execute("a", local_add, 1, 2)
    b = ctx.await_execute("b", remote_double, a, agent=agent)
    c = ctx.await_execute("c", local_add, b, 1)
    both = ctx.graph()
    both.add("d", local_add, c, 1)
    both.add("e", remote_double, c, agent=agent)
    results = both.run()
    ctx.set_payload({"a": a, "b": b, "c": c, **results})


@workflow
def local_slow(ctx, seconds=1.0, timeout=None, marker_dir=None):
    ctx.set_payload({"result": ctx.await_execute("slow", local_sleep, seconds, marker_dir, timeout=timeout)})


@workflow
def local_retried(ctx):
    ctx.set_payload({"attempt": ctx.await_execute("flaky", local_flaky)})


# --- for the integration tests (tests/integration/test_local_steps.py) ------------------------

@operation(local=True, max_retries=1, retry_interval=0)
def local_nap(ctx, seconds, marker_dir, retry_seconds=None, heeds_cancel=True):
    """Sleeps ``seconds`` (``retry_seconds`` on a retry, when given), polling ``ctx.is_cancelled()``
    unless ``heeds_cancel`` is false (then only a kill or a timeout ends it early).

    Notes in ``marker_dir`` that attempt N began (``<step>.<N>.began.<pid>``) and how it ended
    (``<step>.<N>.returned``, or the class of what ended it: ``.LocalStepTimeout``,
    ``.OperationCancelled``): a test tells an attempt interrupted from one that ran to its end,
    and one whose process died (no ending at all), without timing anything."""
    if ctx.attempt > 1 and retry_seconds is not None:
        seconds = retry_seconds
    stem = f"{ctx.name}.{ctx.attempt}"
    Path(marker_dir, f"{stem}.began.{os.getpid()}").touch()
    ended = "returned"
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if heeds_cancel:
                ctx.raise_if_cancelled()
            time.sleep(0.05)
    except BaseException as exc:
        ended = type(exc).__name__
        raise
    finally:
        Path(marker_dir, f"{stem}.{ended}").touch()
    return {"slept": seconds, "attempt": ctx.attempt}


@workflow
def local_napping(ctx, seconds, marker_dir, timeout=None, retry_seconds=None, heeds_cancel=True):
    """One local step, ``nap``."""
    result = ctx.await_execute("nap", local_nap, seconds, marker_dir, retry_seconds, heeds_cancel, timeout=timeout)
    ctx.set_payload({"result": result})


@workflow
def local_naps(ctx, n, seconds, marker_dir, pause_after=None, pause=0.0):
    """``n`` local steps in a row, ``nap-0``, ``nap-1``, ... Once step ``pause_after`` returned, the
    workflow code pauses ``pause`` s the first time it gets there (``paused-<i>`` in ``marker_dir``
    says it did), inside the transaction of the pass that records that step's result."""
    attempts = []
    for i in range(n):
        attempts.append(ctx.await_execute(f"nap-{i}", local_nap, seconds, marker_dir)["attempt"])
        paused = Path(marker_dir, f"paused-{i}")
        if i == pause_after and not paused.exists():
            paused.touch()
            time.sleep(pause)
    ctx.set_payload({"attempts": attempts})


# --- for the harness' tests (tests/testing/test_harness_local.py) -----------------------------

#: The version of ``local_deploy``'s code that runs ("1" when unset): a test "deploys" another.
LOCAL_CODE_VERSION_ENV = "SWITCHYARD_TEST_LOCAL_CODE_VERSION"


@operation(local=True, max_retries=1, retry_interval=0)
def local_blocking_sleep(ctx, seconds, marker_dir):
    """Notes its start, sleeps ``seconds`` in one blocking call (only a signal ends it sooner),
    then notes its end: ``<attempt>.started``, ``<attempt>.finished`` in ``marker_dir``."""
    Path(marker_dir, f"{ctx.attempt}.started").touch()
    time.sleep(seconds)
    Path(marker_dir, f"{ctx.attempt}.finished").touch()
    return seconds


@workflow
def local_timed_out(ctx, marker_dir, seconds=5.0, timeout=0.2):
    ctx.set_payload({"slept": ctx.await_execute("sleep", local_blocking_sleep, seconds, marker_dir, timeout=timeout)})


@workflow
def local_patient(ctx, retry_interval=600):
    """``local_flaky`` (its first attempt fails) retried ``retry_interval`` seconds later."""
    ctx.set_payload({"attempt": ctx.await_execute("flaky", local_flaky, max_retries=1, retry_interval=retry_interval)})


@workflow
def local_with_agent(ctx, declared=True):
    """A local step that names an agent (declared local, or ``local=True`` on the call): refused."""
    if declared:
        ctx.await_execute("tally", local_add, 1, 2, agent="warehouse")
    else:
        ctx.await_execute("tally", remote_double, 1, local=True, agent="warehouse")


@workflow
def local_overridden(ctx):
    """``local_add`` (declared local) called with ``local=False``: sent as any step; then as declared;
    then ``remote_double`` called with ``local=True``."""
    sent = ctx.await_execute("sent", local_add, 1, 2, local=False)
    here = ctx.await_execute("here", local_add, sent, 3)
    asked = ctx.await_execute("asked", remote_double, here, local=True)
    ctx.set_payload({"sent": sent, "here": here, "asked": asked})


@workflow
def local_canvas(ctx):
    """A Celery chain of a local operation's signatures."""
    ctx.set_payload({"sum": ctx.run_canvas(chain(local_add.s(1, 2), local_add.s(10), local_add.s(100)))})


@workflow
def local_deploy(ctx):
    """Version 1: local step ``a``, the event ``go``, local step ``b``; the payload lists their results.

    - 2: the change done right: local step ``c`` before the event, behind ``ctx.patched``;
    - 3: ``c`` before the event, unguarded;
    - 4: ``b`` asked with other arguments."""
    v = os.environ.get(LOCAL_CODE_VERSION_ENV, "1")
    ran = [ctx.await_execute("a", local_add, 1, 1)]
    if (v == "2" and ctx.patched("local-c")) or v == "3":
        ran.append(ctx.await_execute("c", local_add, 2, 2))
    ctx.await_event("go")
    ran.append(ctx.await_execute("b", local_add, 3, 30 if v == "4" else 3))
    ctx.set_payload({"ran": ran})


@workflow
def local_cancelled_at_once(ctx):
    """A local step cancelled by the code in the pass that asked for it: it never runs."""
    handle = ctx.execute("a", local_add, 1, 2)
    ctx.set_payload({"cancelled": ctx.cancel_step(handle), "after": ctx.await_execute("b", local_add, 2, 2)})


BAD_VALUES = {"nan": float("nan"), "nul": "a\x00b", "surrogate": "a\ud800b", "three_mb": "x" * (3 * 1024 * 1024)}


@operation(local=True)
def local_returns(ctx, which):
    return BAD_VALUES[which]


@operation(local=True)
def local_logs(ctx, which):
    ctx.log("look", value=BAD_VALUES[which])
    return "logged"


@workflow
def local_bad_value(ctx, which="nan", how="returns"):
    ctx.await_execute("bad", local_returns if how == "returns" else local_logs, which)


@workflow
def local_not_a_boolean(ctx):
    ctx.await_execute("x", local_add, 1, 2, local="yes")
