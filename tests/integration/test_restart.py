"""Resume, restart, reconnection and shutdown with real processes: chaos tests.

Every test runs a real manager and real agents (``tests/integration/harness.py``), breaks
something — a failed operation, a cancel, a SIGKILLed manager, a restarted broker, a SIGTERM —
and then checks what users rely on: the execution ends as it should, nothing that succeeded
ran twice (operations mark ``<tag>:done`` each time they finish, in files the engine never
reads), and the event log agrees with the state machines. An agent SIGKILLed mid-operation and
started again is ``test_engine.py::test_agent_killed_mid_operation_is_retried_after_it_starts_again``.
"""

import json
import os
import re
import time
import uuid
from datetime import timedelta
from io import StringIO

import kombu
import psutil
import pytest
from django.conf import settings
from django.core.management import call_command
from django.utils import timezone

from agents.worker import local
from switchyard.celery import app
from tests.integration.harness import RedisServer, assert_operation_events_consistent, describe_execution
from tests.integration.test_engine import finish, gone, operations, up
from workflows_app import broker, services
from workflows_app.models import Event, Execution, Operation

pytestmark = [pytest.mark.integration, pytest.mark.slow]

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def ran(stack, tag) -> int:
    return len(stack.invocations(tag))


def finished_once(stack, execution):
    """Every operation of the execution succeeded, and each finished its work exactly once."""
    ops = operations(execution)
    assert {op.state for op in ops.values()} == {"succeeded"}, describe_execution(execution.pk)
    twice = {name: ran(stack, f"{name}:done") for name in ops if ran(stack, f"{name}:done") != 1}
    assert not twice, f"operations that did not finish exactly once: {twice}\n{describe_execution(execution.pk)}"


def event_types(execution, *types):
    return [e.type for e in Event.objects.filter(execution_id=execution.pk, type__in=types).order_by("id")]


def snapshot(execution):
    return (Execution.objects.filter(pk=execution.pk).values("status", "token_hash", "error").get(),
            sorted(Operation.objects.filter(execution_id=execution.pk).values_list("name", "state", "attempt")),
            Event.objects.filter(execution_id=execution.pk).count())


def run_command(stack, name, *args, timeout=60):
    """``manage.py *args`` as its own process; returns (exit status, what it printed)."""
    proc = stack.manage(name, *args, expect_exit=True)
    proc.wait(timeout=timeout)
    return proc.returncode, proc.log_text().split("\n", 1)[1]


# --- resume -------------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_resume_of_a_failed_execution_after_its_cause_is_fixed_completes_and_reruns_nothing_that_succeeded(stack, tmp_path):
    s = up(stack)
    cause = tmp_path / "fixed"
    execution = services.start("it_resumable", {"agent": s.h1, "path": str(cause)})
    finish(stack, execution, "failed")
    assert (ran(stack, "before"), ran(stack, "needs"), ran(stack, "after")) == (1, 1, 0)

    cause.write_text("the cause is fixed")
    out = StringIO()
    call_command("resume_execution", str(execution.pk), "--wait", "--timeout", "60", stdout=out)
    assert out.getvalue().splitlines()[0] == f"{execution.pk} started"
    assert out.getvalue().splitlines()[-1].startswith("completed")

    done = finish(stack, execution, "completed")
    assert done.payload == {"after": "after"} and done.error == ""
    assert (ran(stack, "before"), ran(stack, "needs"), ran(stack, "after")) == (1, 2, 1)
    ops = operations(execution)
    assert (ops["before"].attempt, ops["needs"].attempt, ops["after"].attempt) == (1, 2, 1)
    assert event_types(execution, "workflow_started", "workflow_failed", "workflow_resumed", "workflow_completed") == [
        "workflow_started", "workflow_failed", "workflow_resumed", "workflow_completed"]
    assert_operation_events_consistent(execution)

    # A completed execution cannot be resumed: exit status 1, one line, nothing changed.
    before = snapshot(execution)
    status, output = run_command(stack, "resume-completed", "resume_execution", str(execution.pk))
    assert status == 1 and f"cannot resume execution {execution.pk}: it is completed" in output, output
    assert len(output.strip().splitlines()) == 1, output
    assert snapshot(execution) == before


@pytest.mark.django_db(transaction=True)
def test_force_resume_after_retries_were_exhausted_runs_the_failed_operation_exactly_once_more(stack, tmp_path):
    s = up(stack)
    cause = tmp_path / "fixed"
    execution = services.start("it_resumable", {"agent": s.h1, "path": str(cause), "recoverable": True, "retries": 2})
    finish(stack, execution, "failed")
    assert ran(stack, "needs") == 3, "the first attempt and its two retries"

    cause.write_text("the cause is fixed")
    services.force_resume(execution.pk)
    finish(stack, execution, "completed")
    assert (ran(stack, "before"), ran(stack, "needs"), ran(stack, "after")) == (1, 4, 1)
    needs = operations(execution)["needs"]
    assert (needs.attempt, needs.current_retries) == (4, 0)
    assert_operation_events_consistent(execution)


@pytest.mark.django_db(transaction=True)
def test_resume_of_a_cancelled_execution_carries_on_from_where_it_stopped(stack):
    s = up(stack)
    release = stack.base_dir / "release-running"  # the running step ends once the test made it
    execution = services.start("it_stoppable", {"agent": s.h1, "on_cancel": "raise", "seconds": 60.0,
                                                "until": str(release)})
    stack.wait_for_operation(execution.pk, "running", "started")
    stack.wait_for(lambda: ran(stack, "running"), 30, "the running step to run")
    services.cancel(execution.pk)
    finish(stack, execution, "cancelled")
    assert (ran(stack, "first"), ran(stack, "running"), ran(stack, "after")) == (1, 1, 0)
    assert operations(execution)["running"].state == "cancelled"

    # A force-resume is refused while it runs again; a resume of a cancelled execution is not.
    services.resume(execution.pk)
    stack.wait_for_operation(execution.pk, "running", "started")
    before = snapshot(execution)
    status, output = run_command(stack, "force-resume-started", "resume_execution", str(execution.pk), "--force")
    assert status == 1 and f"cannot force-resume execution {execution.pk}: it is started" in output, output
    assert snapshot(execution)[:2] == before[:2], "a refused force-resume changes nothing"

    release.touch()
    done = finish(stack, execution, "completed")
    assert (ran(stack, "first"), ran(stack, "running"), ran(stack, "after")) == (1, 2, 1)
    assert done.payload is not None and operations(execution)["running"].result == "finished"
    assert_operation_events_consistent(execution)


# --- restart ------------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_manager_sigkilled_while_operations_run_a_new_manager_completes_the_execution(stack):
    s = up(stack)
    # The slow steps run a command (a child process) on their first attempt: 60 s on the manager,
    # far longer than the test; 10 s on the agent.
    execution = services.start("it_restart", {"agents": [s.h1, s.h2], "seconds": 10.0, "manager_seconds": 60.0,
                                              "spawn": True})
    for name in ("slow-manager", "slow-agent"):
        stack.wait_for_operation(execution.pk, name, "started")
    stack.wait_for(lambda: ran(stack, "slow-manager"), 30, "slow-manager to run")
    command = stack.invocations("slow-manager")[0]["child"]

    stack.kill(s.manager)
    # Celery's pool process dies with its manager (PDEATHSIG); the command it ran does not.
    assert not gone(command), "the operation's command outlives its manager, as on a real host"
    stack.start_manager(concurrency=4, name="manager-2")
    # The new manager kills what the dead one left running on this host...
    stack.wait_for(lambda: gone(command), 30, f"the command {command} the dead manager left to be killed")

    finish(stack, execution, "completed", timeout=90)
    finished_once(stack, execution)
    ops = operations(execution)
    # ...and its operation, which no live worker runs, is lost (retryable) and runs again.
    assert ops["slow-manager"].attempt == 2
    lost = Event.objects.filter(execution_id=execution.pk, operation="slow-manager", type="task_rescheduled").get()
    assert "lost during restart" in lost.message, lost.message
    assert ops["slow-agent"].attempt == 1, "the agent's operation ran on, untouched"
    assert_operation_events_consistent(execution)


@pytest.mark.django_db(transaction=True)
def test_an_outcome_lost_with_the_manager_that_took_it_is_sent_again_by_its_agent(stack):
    # On Redis a manager takes a report with BRPOP, which removes it from the queue as it hands
    # it over: a manager killed at that moment takes the report with it. Here the manager dies
    # while the step runs and the report its agent sends then is dropped from the queue.
    s = up(stack)
    execution = services.start("it_single", {"agent": s.h1, "tag": "lost-outcome", "seconds": 3.0})
    stack.wait_for(lambda: ran(stack, "lost-outcome"), 30, "the step to start")
    stack.kill(s.manager)
    step = Operation.objects.get(execution=execution, name="long")
    finished = local._finished_path(s.h1) / local.attempt_key(step.pk, step.attempt)
    stack.wait_for(finished.exists, 30, "the agent to report the step's outcome")
    with app.connection_for_write() as connection:
        broker.reports_queue()(connection.default_channel).purge()
    # As if a minute had passed (the tick asks for attempts started, and the agent sends outcomes
    # of attempts ended, more than RESEND_AFTER_SECONDS ago), without the test waiting for it.
    a_minute_ago = time.time() - 60
    os.utime(finished, (a_minute_ago, a_minute_ago))
    Operation.objects.filter(pk=step.pk).update(started_at=timezone.now() - timedelta(seconds=60))

    stack.start_manager(concurrency=4, name="manager-2")
    # The new manager leaves the step to its live agent (claimed less than a claim's timeout ago);
    # its tick then asks for the outcomes of attempts started long ago, and the agent has it.
    assert finish(stack, execution, "completed", timeout=60).payload == {"result": "lost-outcome"}
    step.refresh_from_db()
    assert (step.state, step.attempt) == ("succeeded", 1), "the outcome it reported, not a second attempt"
    assert ran(stack, "lost-outcome") == 1
    assert_operation_events_consistent(execution)


@pytest.mark.django_db(transaction=True)
def test_a_claim_lost_with_the_manager_that_took_it_is_sent_again_by_its_agent(stack):
    # The same loss for a claim: the agent's only pool process waits for the answer. A claim sent
    # once would keep it, and the step, waiting a claim's whole timeout (DATABASE_OUTAGE_TOLERANCE
    # and a margin: 130 s); the new manager's second delivery of the step waits behind it.
    s = up(stack, concurrency=(1, 2))
    stack.stop(s.agents[s.h1])
    execution = services.start("it_single", {"agent": s.h1, "tag": "lost-claim", "seconds": 0.1})
    stack.wait_for_operation(execution.pk, "long", "sent")
    stack.kill(s.manager)
    stack.start_agent(s.h1, concurrency=1)
    step = Operation.objects.get(execution=execution, name="long")
    drop_claim(stack, step)
    stack.start_manager(concurrency=4, name="manager-2")
    assert finish(stack, execution, "completed", timeout=60).payload == {"result": "lost-claim"}
    step.refresh_from_db()
    assert (step.state, step.attempt) == ("succeeded", 1)
    assert ran(stack, "lost-claim") == 1
    assert_operation_events_consistent(execution)


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not broker.broker_is_redis(), reason="RabbitMQ gives a dead consumer's messages back itself")
def test_a_message_its_agent_took_as_it_was_killed_is_sent_again(stack):
    # On Redis a worker takes a message with BRPOP and only then records it as held (kombu's
    # unacked hash): an agent SIGKILLed between the two takes the message with it, and its next
    # run has nothing to give back. Here the message is taken from the queue as that agent would.
    s = up(stack)
    stack.stop(s.agents[s.h1])
    execution = services.start("it_single", {"agent": s.h1, "tag": "lost-message", "seconds": 0.1})
    step = stack.wait_for_operation(execution.pk, "long", "sent")
    with kombu.Connection(settings.CELERY_BROKER_URL) as connection:
        message = connection.channel().basic_get(s.h1, no_ack=True)
    assert message.headers["id"] == f"{step.pk}.{step.attempt}", message.headers
    # As if it had been sent a minute ago (RESEND_AFTER_SECONDS), without the test waiting for it.
    Operation.objects.filter(pk=step.pk).update(sending_at=timezone.now() - timedelta(seconds=60))
    stack.start_agent(s.h1, concurrency=1)
    assert finish(stack, execution, "completed", timeout=60).payload == {"result": "lost-message"}
    step.refresh_from_db()
    assert (step.state, step.attempt) == ("succeeded", 1), "the same attempt, sent again"
    assert ran(stack, "lost-message") == 1
    assert_operation_events_consistent(execution)


@pytest.mark.skipif(not broker.broker_is_redis(), reason="RabbitMQ's queues are not read without taking their messages")
def test_what_waits_in_a_queue_or_is_held_from_it_is_found_but_a_backlog_is_not_read_through():
    queue = f"held-{uuid.uuid4().hex[:8]}"
    for n in range(3):
        app.send_task("anything", queue=queue, task_id=f"{queue}.{n}", ignore_result=True)
    assert broker.task_ids_held(queue, 10) == {f"{queue}.{n}" for n in range(3)}
    assert broker.task_ids_held(queue, 2) is None, "more than the limit wait: not read"
    with kombu.Connection(settings.CELERY_BROKER_URL) as connection:
        channel = connection.channel()
        taken = channel.basic_get(queue, no_ack=False)  # held, as a worker holds what it runs
        assert broker.task_ids_held(queue, 10) == {f"{queue}.{n}" for n in range(3)}
        channel.basic_ack(taken.delivery_tag)
        assert broker.task_ids_held(queue, 10) == {f"{queue}.{n}" for n in range(3)} - {taken.headers["id"]}
        broker.purge(queue)


def drop_claim(stack, step, timeout=60):
    """Take the agent's claim of ``step`` from the reports queue and drop it, as a manager killed
    as it takes it would; the other reports it reads go back to the queue when it closes."""
    name = broker.reports_queue().name
    with kombu.Connection(settings.CELERY_BROKER_URL) as connection:
        channel = connection.channel()

        def dropped():
            while (message := channel.basic_get(name, no_ack=False)) is not None:
                report = json.loads(message.body)
                if report.get("kind") == "claim" and report.get("operation") == str(step.pk):
                    channel.basic_ack(message.delivery_tag)
                    return True
            return False

        stack.wait_for(dropped, timeout, "the agent's claim")


@pytest.fixture
def own_redis(tmp_path):
    server = RedisServer(tmp_path / "redis").start()
    try:
        yield server
    finally:
        server.kill()


@pytest.mark.django_db(transaction=True)
def test_broker_restarted_mid_execution_lost_messages_are_sent_again_and_it_completes(own_redis, stack):
    stack.use_broker(own_redis.url)
    s = up(stack)
    # host-1 runs two operations at a time: most of the eight wide steps wait in its queue.
    status, output = run_command(stack, "start", "start_execution", "it_restart", "--param", f'agents=["{s.h1}","{s.h2}"]',
                                 "--param", "seconds=2", "--param", "chain=4", "--param", "wide=8",
                                 "--param", "step_seconds=1.5")
    assert status == 0, output
    execution = Execution.objects.get(pk=[line for line in output.split() if UUID.match(line)][0])

    def queued():
        return Operation.objects.filter(execution_id=execution.pk, name__startswith="w", state="sent").count() >= 3

    stack.wait_for(queued, 60, "wide steps to wait in host-1's queue", lambda: describe_execution(execution.pk))
    before = own_redis.run_id()
    own_redis.restart()  # every queued message is gone
    assert own_redis.run_id() != before

    finish(stack, execution, "completed", timeout=120)
    finished_once(stack, execution)
    assert "the broker restarted" in stack.processes[0].log_text()
    assert_operation_events_consistent(execution)


# --- shutdown -----------------------------------------------------------------------------------

PHASES = {"stop_intake": 2, "finish_running": 3, "flush": 5}


@pytest.mark.django_db(transaction=True)
def test_manager_sigterm_exits_within_its_phase_timeouts_and_a_new_manager_finishes(stack):
    stack.configure(SHUTDOWN_PHASE_TIMEOUTS=PHASES)
    s = up(stack)
    execution = services.start("it_restart", {"agents": [s.h1, s.h2], "seconds": 2.0, "manager_seconds": 60.0})
    stack.wait_for_operation(execution.pk, "slow-manager", "started")
    stack.wait_for(lambda: ran(stack, "slow-manager"), 30, "slow-manager to run")
    pool_process = stack.invocations("slow-manager")[0]["pid"]

    began = time.monotonic()
    status = stack.stop(s.manager, timeout=60)
    took = time.monotonic() - began
    assert status == 0, s.manager.log_tail(60)
    assert took < sum(PHASES.values()), f"took {took:.1f}s"
    assert "handed back" in s.manager.log_text()
    # What it could not finish it handed back: a lost, retryable attempt, its process gone.
    slow = operations(execution)["slow-manager"]
    assert (slow.state, slow.attempt) == ("rescheduled", 1), describe_execution(execution.pk)
    assert "handed back" in slow.error["message"]
    assert not psutil.pid_exists(pool_process)

    stack.start_manager(concurrency=4, name="manager-2")
    finish(stack, execution, "completed", timeout=90)
    assert operations(execution)["slow-manager"].attempt == 2
    assert ran(stack, "slow-manager:done") == 1
    finished_once(stack, execution)
    assert_operation_events_consistent(execution)


@pytest.mark.django_db(transaction=True)
def test_agent_sigterm_lets_what_ends_in_time_finish_and_hands_back_the_rest(stack):
    stack.configure(SHUTDOWN_PHASE_TIMEOUTS=PHASES)
    s = up(stack)
    execution = services.start("it_restart", {"agents": [s.h1, s.h2], "seconds": 60.0, "manager_seconds": 0.5,
                                              "chain": 2, "step_seconds": 2.0})
    stack.wait_for_operation(execution.pk, "slow-agent", "started")
    stack.wait_for(lambda: ran(stack, "slow-agent"), 30, "slow-agent to run")
    # c0 (2 s, on host-1) runs too when the SIGTERM comes: it ends well within finish_running.
    stack.wait_for_operation(execution.pk, "c0", "started")

    began = time.monotonic()
    status = stack.stop(s.agents[s.h1], timeout=60)
    took = time.monotonic() - began
    assert status == 0 and took < sum(PHASES.values()), (status, took, s.agents[s.h1].log_tail(60))
    ops = operations(execution)
    assert (ops["c0"].state, ops["c0"].attempt) == ("succeeded", 1), "c0 finished in time, on its first attempt"
    handed_back = Event.objects.filter(execution_id=execution.pk, operation="slow-agent", type="task_rescheduled").get()
    assert handed_back.data["attempt"] == 1 and "handed back" in handed_back.message, handed_back.message

    stack.start_agent(s.h1)
    finish(stack, execution, "completed", timeout=90)
    assert operations(execution)["slow-agent"].attempt == 2
    finished_once(stack, execution)
    assert_operation_events_consistent(execution)
