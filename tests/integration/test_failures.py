"""Workflow code meets failure, end to end on a real manager and agent: a step's failure
caught and compensated (the saga) in every failure mode and every way of running steps, one
recorded and raised again, a fail_fast cancel that kills the running step's processes before the
code sees the failure, workflow code that raises and is tried again until a fix is deployed, and
the determinism guard. Operations count their real invocations in marker files."""

import time
from datetime import datetime

import pytest

from tests.integration.harness import assert_operation_events_consistent, describe_execution
from tests.integration.test_engine import finish, gone, operations
from tests.workflows import SAGA_STYLES
from workflows_app import services
from workflows_app.models import Event, Wait
from workflows_app.states import FailureMode

pytestmark = pytest.mark.integration

MODES = [mode.value for mode in FailureMode]


def up(stack, concurrency=6):
    """A manager and one agent (``host``), ready; returns the agent's name."""
    stack.start_manager(concurrency=4)
    agent = stack.agent_name("host")
    stack.start_agent(agent, concurrency=concurrency)
    stack.wait_for_agent(agent)
    return agent


def first_event(execution, operation, type):
    return Event.objects.filter(execution_id=execution.pk, operation=operation, type=type).order_by("id").first()


# --- the saga: a failure caught and compensated ---------------------------------------------------

@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("style", SAGA_STYLES)
def test_a_charge_that_fails_for_good_is_caught_refunded_once_and_the_execution_completes(stack, style):
    """The same order in each failure mode, at once: ``pack`` runs while ``charge`` fails; the
    workflow catches the StepFailed and runs ``refund``, a step asked after the failure."""
    agent = up(stack)
    executions = {mode: services.start("it_saga", {"agent": agent, "style": style, "tags": f"{mode}-"},
                                       failure_mode=mode) for mode in MODES}
    for mode, execution in executions.items():
        done = finish(stack, execution, "completed")
        ops = operations(execution)
        ran = {name: len(stack.invocations(f"{mode}-{name}")) for name in ("reserve", "pack", "charge", "ship", "refund")}
        why = f"{mode}: {describe_execution(execution.pk)}"

        assert done.error == "", why
        assert done.payload["saw"]["failed"] == "charge" and done.payload["refund"] == f"{mode}-refund", why
        assert (ops["charge"].state, ops["charge"].failure_handled) == ("failed", True), "the record keeps the failure"
        assert ops["charge"].error["type"] == "NonRecoverableError"
        assert (ops["refund"].state, ran["refund"]) == ("succeeded", 1), why
        assert ran["ship"] == 0 and ops.get("ship") is None or ops["ship"].state == "cancelled", why
        assert (ran["reserve"], ran["charge"], ran["pack"]) == (1, 1, 1), why
        pack_ended = Event.objects.filter(execution_id=execution.pk, operation="pack",
                                          type__in=["task_succeeded", "task_cancelled"]).get()
        assert pack_ended.id < first_event(execution, "refund", "task_sending").id, \
            f"{mode}: the code saw the failure only after pack ended"
        if mode == FailureMode.FAIL_FAST:
            assert ops["pack"].state == "cancelled" and ops["pack"].error["cause"] == "charge", why
        else:
            assert ops["pack"].state == "succeeded", f"{mode}: pack runs to its end"
        assert_operation_events_consistent(execution)


@pytest.mark.django_db(transaction=True)
def test_an_uncaught_step_failure_runs_the_except_block_that_records_it_then_fails(stack):
    """``g.run()`` and ``run_canvas`` raise StepFailed; the workflow's ``except`` block writes the
    payload and raises again: ``failed``, the payload kept, the error naming the step."""
    agent = up(stack)
    executions = {style: services.start("it_saga", {"agent": agent, "style": style, "reraise": True, "tags": f"{style}-"},
                                        failure_mode="no_new_calls") for style in ("graph", "canvas")}
    for style, execution in executions.items():
        done = finish(stack, execution, "failed")
        assert done.payload == {"saw": {"failed": "charge", "error": "NonRecoverableError"}}, style
        assert done.error.startswith(f"operation 'charge' failed: NonRecoverableError: {style}-charge fails for good\n"
                                     "Traceback"), done.error
        ops = operations(execution)
        assert ops["pack"].state == "succeeded" and ops["ship"].state == "cancelled" and "refund" not in ops
        assert not ops["charge"].failure_handled
        assert len(stack.invocations(f"{style}-ship")) == 0
        assert_operation_events_consistent(execution)


@pytest.mark.django_db(transaction=True)
def test_fail_fast_kills_the_running_step_before_the_workflow_sees_the_failure(stack):
    """``pack`` runs a command for a minute; ``charge`` fails. fail_fast cancels ``pack`` and
    kills its whole process tree, and only then does the workflow's except block run."""
    agent = up(stack)
    execution = services.start("it_saga", {"agent": agent, "style": "graph", "pack_seconds": 60.0, "spawn": True},
                               failure_mode="fail_fast")
    done = finish(stack, execution, "completed", timeout=30)
    ops = operations(execution)
    (pack_run,) = stack.invocations("pack")
    assert ops["pack"].state == "cancelled" and ops["pack"].error["message"] == "cancelled (fail_fast): charge failed"
    assert gone(pack_run["child"]) and gone(pack_run["pid"]), "the step's command and its process are gone"
    processes_gone = Event.objects.get(execution_id=execution.pk, operation="pack", data__processes_gone=1)
    handled = Event.objects.get(execution_id=execution.pk, operation="charge", data__failure_handled=True)
    assert first_event(execution, "pack", "task_cancelled").id < processes_gone.id < handled.id, \
        "cancelled, its processes gone, and only then shown to the code"
    (refund_run,) = stack.invocations("refund")
    assert refund_run["time"] >= processes_gone.timestamp.timestamp()
    assert done.payload["saw"] == {"failed": "charge", "error": "NonRecoverableError"}
    assert_operation_events_consistent(execution)


# --- workflow code that raises: on_unhandled="retry" --------------------------------------------

def retrying(execution):
    return list(Event.objects.filter(execution_id=execution.pk, type="workflow_retrying").order_by("id"))


@pytest.mark.django_db(transaction=True)
def test_workflow_code_that_raises_is_tried_again_until_the_fix_is_deployed_then_completes(stack, tmp_path):
    """RETRY_INTERVAL is 0.2 s in these stacks: tries after 0.2, 0.4, 0.8 s..."""
    agent = up(stack)
    fixed = tmp_path / "fixed"
    execution = services.start("it_buggy", {"agent": agent, "fixed_path": str(fixed)})
    stack.wait_for(lambda: len(retrying(execution)) >= 3, 30, "three tries that raise",
                   lambda: describe_execution(execution.pk))
    fixed.touch()  # the fix is deployed
    done = finish(stack, execution, "completed")

    tries = retrying(execution)
    delays = [event.data["delay"] for event in tries]
    assert delays[:3] == [0.2, 0.4, 0.8] and all(b == min(2 * a, 600) for a, b in zip(delays, delays[1:])), delays
    gaps = [(b.timestamp - a.timestamp).total_seconds() for a, b in zip(tries, tries[1:])]
    assert all(gap >= delay for gap, delay in zip(gaps, delays)), (gaps, delays)
    assert all("RuntimeError: a bug in the workflow code" in event.data["traceback"] for event in tries)
    assert done.payload == {"after": "after"} and done.error == ""
    assert len(stack.invocations("before")) == 1, "a stored step never runs again"
    assert len(stack.invocations("after")) == 1
    assert_operation_events_consistent(execution)


@pytest.mark.django_db(transaction=True)
def test_a_try_waiting_for_its_backoff_survives_a_manager_restart(stack, tmp_path):
    stack.configure(RETRY_INTERVAL=4)
    agent = up(stack)
    fixed = tmp_path / "fixed"
    execution = services.start("it_buggy", {"agent": agent, "fixed_path": str(fixed)})
    stack.wait_for(lambda: retrying(execution), 30, "the first try to raise", lambda: describe_execution(execution.pk))
    manager = next(p for p in stack.processes if p.name == "manager")
    stack.kill(manager)
    fixed.touch()
    stack.start_manager(concurrency=2)
    finish(stack, execution, "completed", timeout=30)
    (backoff,) = retrying(execution)
    assert backoff.data["delay"] == 4
    assert first_event(execution, "after", "task_started").timestamp >= datetime.fromisoformat(backoff.data["next_try_at"]), \
        "the new manager's tick ended the stored backoff, not before it was due"
    assert len(stack.invocations("before")) == 1
    assert_operation_events_consistent(execution)


@pytest.mark.django_db(transaction=True)
def test_cancel_stops_the_tries(stack, tmp_path):
    agent = up(stack)
    execution = services.start("it_buggy", {"agent": agent, "fixed_path": str(tmp_path / "never")})
    stack.wait_for(lambda: len(retrying(execution)) >= 2, 30, "two tries", lambda: describe_execution(execution.pk))
    services.cancel(execution.pk)
    finish(stack, execution, "cancelled")
    tries = len(retrying(execution))
    time.sleep(2.0)  # several backoffs' worth at 0.2 s doubling
    assert len(retrying(execution)) == tries, "no try after the cancel"
    assert_operation_events_consistent(execution)


# --- the determinism guard ----------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_a_replay_that_changes_a_steps_operation_or_arguments_fails_with_both_in_the_error(stack, tmp_path):
    agent = up(stack)
    manager = next(p for p in stack.processes if p.name == "manager")
    executions = {}
    for change in ("operation", "arguments"):
        executions[change] = services.start("it_changing", {"agent": agent, "change": change,
                                                            "changed_path": str(tmp_path / "changed")})
    for execution in executions.values():  # both wait for "go": x is stored and replayed as it was
        stack.wait_for(lambda pk=execution.pk: Wait.objects.filter(execution_id=pk, key="event:go#1").exists(), 30,
                       "the workflow to wait for go", lambda pk=execution.pk: describe_execution(pk))
    # A careless deploy while they wait for "go": new code, in a manager started again (the
    # old one kept their functions live, suspended on the old code).
    (tmp_path / "changed").touch()
    stack.restart(manager)
    for execution in executions.values():
        services.send_event(execution.pk, "go")
    stored = "it_step args=['x'] kwargs={'value': 1}"
    asked = {"operation": "it_where args=['x'] kwargs={}", "arguments": "it_step args=['x'] kwargs={'value': 2}"}
    for change, execution in executions.items():
        done = finish(stack, execution, "failed")
        assert f"step 'x' was stored as {stored}, and this replay asked for {asked[change]}" in done.error, done.error
        assert done.error.startswith("non-deterministic workflow")
        assert operations(execution)["x"].result == 1, "the stored result is not handed to a different call"
        assert_operation_events_consistent(execution)
