"""Cancel, force-cancel and kill with a real manager and real agents.

Operations count their real invocations in marker files; process ids come from those markers
and are checked with psutil. The ``stack`` fixture also checks, after each test, the invariant of
cancel-first-terminate-after over every execution that ended.
"""

import os
import signal
import time

import psutil
import pytest

from tests.integration.harness import assert_operation_events_consistent, describe_execution
from tests.integration.test_engine import TERMINAL, events, finish, gone, operations, up
from workflows_app import services
from workflows_app.models import Event, Execution, Operation

pytestmark = pytest.mark.integration


def queue_length(name) -> int:
    """Messages waiting in the broker queue ``name``."""
    from switchyard.celery import app

    with app.connection_for_read() as conn:
        try:
            return conn.default_channel.queue_declare(queue=name, passive=True).message_count
        except Exception:  # a queue nobody declared yet holds nothing
            return 0


@pytest.mark.django_db(transaction=True)
def test_cancel_before_start_runs_nothing(stack):
    host = stack.agent_name("host-1")
    execution = services.start("it_single", {"agent": host, "tag": "never", "seconds": 0.0})
    assert services.cancel(execution.pk).status == "cancelled"

    # Its start message is still in the management queue: a manager that takes it must do nothing.
    stack.start_manager()
    stack.start_agent(host)
    stack.wait_for_agent(host)
    stack.wait_for(lambda: queue_length(stack.management_queue) == 0, 30, "the manager to take the start message")
    time.sleep(2)
    execution.refresh_from_db()
    assert execution.status == "cancelled" and execution.started_at is None
    assert not Operation.objects.filter(execution_id=execution.pk).exists()
    assert stack.invocations("never") == []
    assert [e.type for e in Event.objects.filter(execution_id=execution.pk)] == ["log", "workflow_cancelled"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("on_cancel, running_ends", [
    ("return", "succeeded"),     # a running operation that returns normally keeps its result
    ("raise", "cancelled"),      # ctx.raise_if_cancelled(): OperationCancelled
    ("recoverable", "failed"),   # a retryable failure is not retried while cancelling
])
def test_cancel_mid_run_awaits_the_running_operation_and_never_starts_its_dependents(stack, on_cancel, running_ends):
    """Cromwell's scheduled abort: what finished stays finished, what runs finishes or stops
    cooperatively, nothing after it starts — not even 5 s after the execution is cancelled."""
    s = up(stack)
    execution = services.start("it_stoppable", {"agent": s.h1, "on_cancel": on_cancel})
    stack.wait_for_operation(execution.pk, "running", "started")
    stack.wait_for(lambda: stack.invocations("running"), 30, "the operation to run")

    assert services.cancel(execution.pk).status == "cancelling"
    done = finish(stack, execution, "cancelled")
    ops = operations(execution)
    assert ops["first"].state == "succeeded"
    assert ops["running"].state == running_ends, describe_execution(execution.pk)
    assert stack.invocations("running-saw-cancel"), "the running operation saw ctx.is_cancelled()"
    assert ops["after"].state == "cancelled" and stack.invocations("after") == []
    assert max(ops["running"].succeeded_at or ops["running"].failed_at or ops["running"].cancelled_at,
               ops["after"].cancelled_at) <= done.ended_at

    time.sleep(5)
    assert stack.invocations("after") == [] and len(stack.invocations("running")) == 1
    assert Operation.objects.get(pk=ops["after"].pk).state == "cancelled"
    assert events(execution, "task_rescheduled") == [], "no retry while cancelling"
    assert Execution.objects.get(pk=execution.pk).status == "cancelled"
    assert_operation_events_consistent(execution)


@pytest.mark.django_db(transaction=True)
def test_force_cancel_ends_an_execution_stuck_cancelling_behind_a_non_cooperative_operation(stack):
    s = up(stack)
    execution = services.start("it_stoppable", {"agent": s.h1, "on_cancel": "ignore", "seconds": 6.0})
    stack.wait_for_operation(execution.pk, "running", "started")
    services.cancel(execution.pk)
    time.sleep(1.5)
    assert Execution.objects.get(pk=execution.pk).status == "cancelling", "the operation ignores the cancel"

    assert services.force_cancel(execution.pk).status == "cancelled"
    ops = operations(execution)
    assert (ops["first"].state, ops["running"].state, ops["after"].state) == ("succeeded", "cancelled", "cancelled")
    # Its process was not signalled: it runs to its end, and what it reports is kept, changing nothing.
    stale = stack.wait_for(lambda: events(execution, "stale_report", "running"), 30, "the late report")
    assert stale[0].data["result"] == "finished"
    assert Operation.objects.get(pk=ops["running"].pk).state == "cancelled"
    assert stack.invocations("after") == []
    assert_operation_events_consistent(execution)


@pytest.mark.django_db(transaction=True)
def test_kill_stops_the_whole_process_tree_of_an_operation_that_ignores_sigterm(stack):
    s = up(stack, concurrency=(1, 1))
    agent = s.agents[s.h1]
    execution = services.start("it_stubborn_wf", {"agent": s.h1})
    run = stack.wait_for(lambda: stack.invocations("stubborn"), 30, "the operation to start its sleep")[0]
    pool_process, sleep = run["pid"], run["child"]
    assert psutil.Process(sleep).name() == "sleep" and not gone(pool_process)

    asked = time.monotonic()
    assert services.kill(execution.pk).status == "cancelled"
    grace = stack.workflows["KILL_GRACE_SECONDS"]
    stack.wait_for(lambda: gone(pool_process) and gone(sleep), grace + 2,
                   f"the pool process {pool_process} and its sleep {sleep} to be gone")
    took = time.monotonic() - asked
    assert took >= grace - 0.5, f"SIGTERM is ignored: only the SIGKILL after the grace period ends it ({took:.1f}s)"

    op = Operation.objects.get(execution_id=execution.pk, name="stubborn")
    assert op.state == "cancelled" and op.error["message"] == "killed"
    assert agent.alive(), "the agent itself survives the kill"
    # ...and runs the next operation, in the pool process Celery started in place of the killed one.
    following = services.start("it_single", {"agent": s.h1, "tag": "next", "seconds": 0.0})
    finish(stack, following, "completed")
    assert len(stack.invocations("next")) == 1
    assert_operation_events_consistent(execution)


@pytest.mark.django_db(transaction=True)
def test_an_agent_stopped_during_a_kill_never_starts_the_attempt(stack):
    stack.start_manager()
    host = stack.agent_name("host-1")  # not running: the operation's message waits in its queue
    execution = services.start("it_single", {"agent": host, "tag": "late", "seconds": 0.0})
    op = stack.wait_for_operation(execution.pk, "long", "sent")
    assert services.kill(execution.pk).status == "cancelled"

    stack.start_agent(host)
    stack.wait_for_agent(host)
    dropped = stack.wait_for(lambda: Event.objects.filter(execution_id=execution.pk, operation="long", type="log",
                                                          data__fenced=True).first(),
                             30, "the agent to receive the message and refuse it")
    assert f"attempt {op.attempt}" in dropped.message
    assert stack.invocations("late") == []
    assert Operation.objects.get(pk=op.pk).state == "cancelled"
    assert events(execution, "task_started") == []


@pytest.mark.django_db(transaction=True)
def test_a_cancel_still_cancelling_after_cancel_timeout_is_killed(stack):
    stack.configure(CANCEL_TIMEOUT=2)
    s = up(stack)
    execution = services.start("it_stoppable", {"agent": s.h1, "on_cancel": "ignore", "seconds": 60.0})
    stack.wait_for_operation(execution.pk, "running", "started")
    pool_process = stack.wait_for(lambda: stack.invocations("running"), 30, "the operation to run")[0]["pid"]
    services.cancel(execution.pk)

    done = stack.wait_for_status(execution.pk, TERMINAL, timeout=30)
    assert done.status == "cancelled"
    assert events(execution, "workflow_cancelling")[-1].data["to"] == "kill_cancelling"
    op = Operation.objects.get(execution_id=execution.pk, name="running")
    assert op.state == "cancelled" and op.error["message"] == "killed"
    stack.wait_for(lambda: gone(pool_process), stack.workflows["KILL_GRACE_SECONDS"] + 2, "the operation's process to die")
    assert_operation_events_consistent(execution)



@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("how, status", [
    ("fail", "failed"), ("cancel", "cancelled"), ("return", "completed"), ("timeout", "timed_out"),
])
def test_every_ending_cancels_and_stops_running_operations_before_the_execution_ends(stack, how, status):
    """Cancel first, terminate after: ``busy`` runs (and ignores cancellation) when the
    execution ends; it gets its terminal event first, and its process is stopped."""
    s = up(stack)
    execution = services.start("it_ends_while_running", {"agent": s.h1, "how": how},
                               timeout=4.0 if how == "timeout" else None)
    done = finish(stack, execution, status)
    busy = Operation.objects.get(execution_id=execution.pk, name="busy")
    assert busy.state == "cancelled" and busy.cancelled_at <= done.ended_at
    cancelled = events(execution, "task_cancelled", "busy")[0]
    ended = Event.objects.get(execution_id=execution.pk, type=f"workflow_{status}")
    assert cancelled.id < ended.id
    pool_process = stack.invocations("busy")[0]["pid"]
    stack.wait_for(lambda: gone(pool_process), stack.workflows["KILL_GRACE_SECONDS"] + 2,
                   f"busy's process {pool_process} to be stopped")
    assert_operation_events_consistent(execution)


@pytest.mark.django_db(transaction=True)
def test_one_sigterm_ends_the_pool_process_of_an_operation_and_its_attempt_is_lost(stack):
    """The SIGTERM of a kill (or of anyone's ``kill``) raises SystemExit in the pool process
    (billiard's handler): the attempt is reported lost and the process ends, as the signal asks.
    Caught as an operation's own ``exit()``, it left the process running; only a second SIGTERM
    ended it, which a kill of an execution sends only now and then."""
    s = up(stack)
    execution = services.start("it_single", {"agent": s.h1, "tag": "obeys", "seconds": 600.0})
    marker = stack.wait_for(lambda: stack.invocations("obeys"), 30, "the step to run")[0]
    os.killpg(marker["pgid"], signal.SIGTERM)
    stack.wait_for(lambda: gone(marker["pid"]), 10, f"the pool process {marker['pid']} to end")
    # Lost (a retryable failure): the second attempt runs, without the sleep of the first.
    finish(stack, execution, "completed")
    lost = Event.objects.get(execution_id=execution.pk, operation="long", type="task_rescheduled")
    assert "got SIGTERM" in lost.message, lost.message
    assert Operation.objects.get(execution_id=execution.pk, name="long").attempt == 2


@pytest.mark.django_db(transaction=True)
def test_kill_stops_a_dispatcher_stuck_in_workflow_code(stack):
    """The dispatcher holds the execution's row lock while workflow code runs; a kill stops its
    process first, and the manager carries on with other work."""
    s = up(stack)
    execution = services.start("it_stuck", {})
    dispatcher = stack.wait_for(lambda: stack.invocations("stuck"), 30, "the workflow code to run")[0]["pid"]
    asked = time.monotonic()
    assert services.kill(execution.pk).status == "cancelled"
    assert time.monotonic() - asked < stack.workflows["KILL_GRACE_SECONDS"] + 2
    stack.wait_for(lambda: gone(dispatcher), 5, f"the dispatcher's process {dispatcher} to be gone")
    time.sleep(1)  # its message comes back (late ack) and finds the execution cancelled
    assert Execution.objects.get(pk=execution.pk).status == "cancelled"
    assert len(stack.invocations("stuck")) == 1
    following = services.start("it_single", {"agent": s.h1, "tag": "next", "seconds": 0.0})
    finish(stack, following, "completed")
