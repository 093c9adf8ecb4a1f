"""Local steps with a real manager (and, for a mixed workflow, a real agent): what a user relies
on when a step runs inside the manager's pass rather than on an agent.

* A chain of local steps survives its manager crashing in the middle of it: what was committed
  never runs again, the step in flight runs once more, and the execution completes.
* A step past its timeout is interrupted inside the pass, and retried as its policy says.
* A cancel waits for a running local step (it sees ``ctx.is_cancelled()``); a kill ends the
  pass' process, and the manager goes on serving.
* A workflow that mixes local steps and an agent's steps completes, and shows which ran where.

The steps (``tests.local_step_workflows.local_nap``) leave marker files in a directory of the
test's: one when an attempt begins (with its process id), one naming how it ended — returned, or
the class of what interrupted it. An attempt that began and has no ending died with its process.
What the tests read comes from those files and the stored rows and events, never from timing.
RabbitMQ is covered by running this file where it is the configured broker (CI's set-up 3).
"""

import os
import signal
from pathlib import Path

import psutil
import pytest
from rest_framework.test import APIClient

import tests.local_step_workflows  # noqa: F401  (registers the workflows in this process)
from tests.api.conftest import VIEWER, make_user
from tests.integration import harness
from tests.integration.harness import assert_operation_events_consistent, describe_execution
from tests.integration.test_engine import events, finish, gone, operations
from workflows_app import services
from workflows_app.models import Event, Operation

pytestmark = pytest.mark.integration

#: Far longer than any test waits: a step that slept this long was not interrupted.
LONG = 60.0


@pytest.fixture
def local_workflows(monkeypatch):
    """Every process of the stack (requested after this fixture) imports the local steps' workflows."""
    monkeypatch.setattr(harness, "WORKFLOW_MODULES", f"{harness.WORKFLOW_MODULES},tests.local_step_workflows")


@pytest.fixture
def naps(tmp_path) -> Path:
    """The directory where ``local_nap`` notes its attempts."""
    directory = tmp_path / "naps"
    directory.mkdir()
    return directory


def attempts(naps_dir, step) -> dict:
    """Attempt number -> ``{"pid": the process it began in, "ended": how it ended, or None}``."""
    found = {}
    for path in Path(naps_dir).iterdir():
        parts = path.name.split(".")
        if parts[0] != step or len(parts) < 3:
            continue
        attempt = found.setdefault(int(parts[1]), {"pid": None, "ended": None})
        if parts[2] == "began":
            attempt["pid"] = int(parts[3])
        else:
            attempt["ended"] = parts[2]
    return found


def began(naps_dir, step, attempt=1):
    """The process id attempt ``attempt`` of ``step`` began in, once it began (else None)."""
    return attempts(naps_dir, step).get(attempt, {}).get("pid")


def crash(stack, manager):
    """End the manager as a crash of its host or an OOM kill of its service would: every process
    of it (the main one and its pool processes, which lead process groups of their own) is frozen
    at once, then SIGKILLed, so none of them runs another line — not even on learning that the
    others died."""
    pool = manager.remember_descendants()
    os.killpg(manager.pid, signal.SIGSTOP)
    for process in pool:
        _signal(process, signal.SIGSTOP)
    for process in pool:
        _signal(process, signal.SIGKILL)
    stack.kill(manager)
    psutil.wait_procs(pool, timeout=10)


def _signal(process, sig):
    try:
        process.send_signal(sig)
    except psutil.NoSuchProcess:
        pass


def step(execution, name) -> Operation:
    return Operation.objects.get(execution_id=execution.pk, name=name)


def events_in_order(execution, *kinds) -> list:
    """``(type, step)`` of the execution's events of these types, in the order they were written."""
    return list(Event.objects.filter(execution_id=execution.pk, type__in=kinds).order_by("id")
                .values_list("type", "operation"))


# --- at least once, across a crash -----------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("moment", ["while-a-step-runs", "while-its-result-is-recorded"])
def test_a_chain_of_local_steps_survives_its_manager_killed_in_the_middle(local_workflows, stack, naps, moment):
    """``nap-0`` is committed when ``nap-1`` begins (the transaction that records it starts the
    next one). The manager dies either while ``nap-1`` sleeps, or once it returned, while the
    workflow code after it runs in the transaction that would record it: either way its result
    was never committed, and a new manager runs it once more; nothing else runs twice."""
    running = moment == "while-a-step-runs"
    manager = stack.start_manager(concurrency=2)
    execution = services.start("local_naps", {"n": 3, "seconds": 1.5 if running else 0.1, "marker_dir": str(naps),
                                              "pause_after": None if running else 1, "pause": LONG})
    if running:
        stack.wait_for(lambda: began(naps, "nap-1"), 30, "nap-1 to begin", lambda: describe_execution(execution.pk))
    else:
        stack.wait_for((naps / "paused-1").exists, 30, "the workflow code after nap-1 to run",
                       lambda: describe_execution(execution.pk))
    crash(stack, manager)

    assert step(execution, "nap-0").state == "succeeded", describe_execution(execution.pk)
    in_flight = step(execution, "nap-1")
    assert (in_flight.state, in_flight.attempt) == ("started", 1), describe_execution(execution.pk)
    assert attempts(naps, "nap-1")[1]["ended"] == (None if running else "returned")

    stack.start_manager(concurrency=2, name="manager-2")
    done = finish(stack, execution, "completed", timeout=60)

    assert done.payload == {"attempts": [1, 2, 1]}, describe_execution(execution.pk)
    assert {attempt: run["ended"] for attempt, run in attempts(naps, "nap-0").items()} == {1: "returned"}
    assert {attempt: run["ended"] for attempt, run in attempts(naps, "nap-1").items()} == {
        1: None if running else "returned", 2: "returned"}
    assert {attempt: run["ended"] for attempt, run in attempts(naps, "nap-2").items()} == {1: "returned"}
    ops = operations(execution)
    assert {name: (op.state, op.attempt, op.local) for name, op in ops.items()} == {
        "nap-0": ("succeeded", 1, True), "nap-1": ("succeeded", 2, True), "nap-2": ("succeeded", 1, True)}
    lost = events(execution, "task_rescheduled")
    assert [(e.operation, e.data["attempt"]) for e in lost] == [("nap-1", 1)], "only the step in flight runs again"
    assert "lost during restart" in lost[0].message, lost[0].message
    assert_operation_events_consistent(execution)


# --- timeout ---------------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("retry_seconds, ends", [(0.0, "completed"), (None, "failed")])
def test_a_local_step_past_its_timeout_is_interrupted_in_the_pass_and_retried_by_its_policy(
        local_workflows, stack, naps, retry_seconds, ends):
    """``nap`` would sleep a minute; its timeout (0.5 s) interrupts it inside the pass (its
    attempt ends on ``LocalStepTimeout``, which only the pass' timer raises) and fails it with
    ``OperationTimeout``, which its policy (one retry) retries. A retry that finishes in time
    completes the execution; one that times out too fails it."""
    stack.start_manager(concurrency=2)
    execution = services.start("local_napping", {"seconds": LONG, "marker_dir": str(naps), "timeout": 0.5,
                                                 "retry_seconds": retry_seconds})
    done = finish(stack, execution, ends, timeout=30)

    runs = attempts(naps, "nap")
    assert runs[1]["ended"] == "LocalStepTimeout", runs
    assert runs[2]["ended"] == ("returned" if ends == "completed" else "LocalStepTimeout"), runs
    assert set(runs) == {1, 2}, "one attempt and the one retry its policy allows"
    retried = events(execution, "task_rescheduled", "nap")
    assert [(e.data["attempt"], e.data["error"]["type"]) for e in retried] == [(1, "OperationTimeout")], \
        describe_execution(execution.pk)
    nap = step(execution, "nap")
    assert nap.attempt == 2
    if ends == "completed":
        assert nap.state == "succeeded" and done.payload == {"result": {"slept": 0.0, "attempt": 2}}
    else:
        assert nap.state == "failed" and nap.error["type"] == "OperationTimeout", nap.error
        assert len(events(execution, "task_failed", "nap")) == 1
    assert_operation_events_consistent(execution)


# --- cancel and kill -------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_a_cancel_waits_for_a_running_local_step_which_sees_it_and_stops(local_workflows, stack, naps):
    """As for a step on an agent: the execution is ``cancelling`` while the step runs, the step
    sees ``ctx.is_cancelled()`` and stops (``OperationCancelled``), and only then does the
    execution end, its terminal event after the step's."""
    stack.start_manager(concurrency=2)
    execution = services.start("local_napping", {"seconds": LONG, "marker_dir": str(naps)})
    stack.wait_for(lambda: began(naps, "nap"), 30, "nap to begin", lambda: describe_execution(execution.pk))

    assert services.cancel(execution.pk).status == "cancelling", "it waits for the running step"
    finish(stack, execution, "cancelled", timeout=30)

    assert attempts(naps, "nap") == {1: {"pid": began(naps, "nap"), "ended": "OperationCancelled"}}, \
        "the step saw ctx.is_cancelled() and stopped, and did not run again"
    nap = step(execution, "nap")
    assert nap.state == "cancelled" and nap.error["type"] == "OperationCancelled", nap.error
    assert events_in_order(execution, "workflow_cancelling", "task_cancelled", "workflow_cancelled") == [
        ("workflow_cancelling", None), ("task_cancelled", "nap"), ("workflow_cancelled", None)]
    assert_operation_events_consistent(execution)


@pytest.mark.django_db(transaction=True)
def test_a_kill_ends_the_pass_running_a_local_step_and_the_manager_serves_on(local_workflows, stack, naps):
    """A kill does not wait: the attempt ends ``cancelled`` "killed" at once and the pool process
    running the pass ends; the manager replaces it and runs the next execution's local steps. The
    step does not look at ``ctx.is_cancelled()``: only the kill's signals can end it (one that
    looks may see the kill first, raise and end its attempt, and its process serves on)."""
    manager = stack.start_manager(concurrency=2)
    execution = services.start("local_napping", {"seconds": LONG, "marker_dir": str(naps), "heeds_cancel": False})
    pid = stack.wait_for(lambda: began(naps, "nap"), 30, "nap to begin", lambda: describe_execution(execution.pk))

    assert services.kill(execution.pk).status == "cancelled"
    stack.wait_for(lambda: gone(pid), stack.workflows["KILL_GRACE_SECONDS"] + 5, f"the pass' process {pid} to end")

    nap = step(execution, "nap")
    assert (nap.state, nap.attempt, nap.error["message"]) == ("cancelled", 1, "killed"), \
        describe_execution(execution.pk)
    assert manager.alive(), "the manager itself survives the kill"
    following = services.start("local_naps", {"n": 2, "seconds": 0.0, "marker_dir": str(naps)})
    assert finish(stack, following, "completed").payload == {"attempts": [1, 1]}

    runs = attempts(naps, "nap")
    # It stopped mid-sleep, and ran no more: its process ended on the kill's SIGTERM (SystemExit) or
    # SIGKILL (no ending).
    assert set(runs) == {1} and runs[1]["ended"] in {"SystemExit", None}, f"the killed step never finished: {runs}"
    assert step(execution, "nap").state == "cancelled"
    assert_operation_events_consistent(execution)


# --- local and remote in one workflow --------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_a_workflow_mixing_local_and_agent_steps_completes_and_shows_where_each_ran(local_workflows, stack):
    """Local steps before, between and beside an agent's (in a graph): each result reaches the
    next step, and the rows and the API say which ran in the manager (``local``, its agent the
    management queue) and which on the agent."""
    stack.start_manager(concurrency=2)
    agent = stack.agent_name("host-1")  # it has no database: the stack checks it tried none
    stack.start_agent(agent)
    stack.wait_for_agent(agent)

    execution = services.start("local_mixed", {"agent": agent})
    done = finish(stack, execution, "completed")

    assert done.payload == {"a": 3, "b": 6, "c": 7, "d": 8, "e": 14}
    where = {name: (op.local, op.agent) for name, op in operations(execution).items()}
    manager = (True, stack.management_queue)
    assert where == {"a": manager, "b": (False, agent), "c": manager, "d": manager, "e": (False, agent)}
    client = APIClient()
    client.force_authenticate(make_user("reader", VIEWER))
    response = client.get(f"/api/v1/executions/{execution.pk}/operations")
    assert response.status_code == 200, response.content
    shown = {row["name"]: (row["local"], row["agent"]) for row in response.json()["results"]}
    assert shown == where
    assert_operation_events_consistent(execution)
