"""Operation messages delivered again, or long after they were sent, with real processes: each
attempt runs at most once, and every attempt that should run does.

A manager sends an operation's attempt to its agent's queue; the agent may hold the message
(delivered, not started) long before it runs it, and the same attempt may reach it more than
once: a run of the agent that died holding messages has them delivered again to its next run
(RabbitMQ gives a dead consumer's messages back at once; on Redis the next run gives back what
the last one held), and a manager that starts sends every operation still ``sent`` again, under
the same attempt. What users rely on, whatever the agent does with each delivery:

* an agent SIGKILLed while it runs ``A`` and holds ``B``'s message: ``B`` runs once, as attempt
  1; ``A``'s attempt 1 is lost and ``A`` runs again as attempt 2, never attempt 1 twice;
* a manager SIGKILLed while messages wait for an agent that is down: the new manager's second
  message of each attempt runs nothing twice, even when both copies reach the agent at once;
* a message held by a busy agent long after it was sent (longer than the engine's timings, and
  than the sweep that sends lost messages again waits) is not sent again meanwhile, and runs
  once, as the attempt it was sent as, when its turn comes.

``B`` is held by the agent as a prefetching worker holds a message: delivered to a pool process
that has not started it. An agent acknowledges messages late and prefetches one per pool
process, so with one pool process ``B`` would wait in the queue instead; here the agent has two,
and the one not running ``A`` is frozen (SIGSTOP) while ``B`` is sent: the broker delivers
``B`` and the worker hands it to that process, which does nothing with it until it is thawed or
killed. ``race_step`` (tests/redelivery_race_workflows.py) marks every invocation with its
attempt, so the tests count what really ran, independently of what the engine recorded.
(A message lost as its agent took it, an agent or a manager killed while operations run, a claim
or an outcome lost with its manager: tests/integration/test_restart.py and test_engine.py.)
RabbitMQ is covered by running this file where it is the configured broker.
"""

import json
import os
import signal
import time
from datetime import timedelta

import kombu
import psutil
import pytest
from django.conf import settings
from django.utils import timezone

import tests.redelivery_race_workflows  # noqa: F401  (registers the workflows in this process)
from tests.integration import harness
from tests.integration.harness import assert_operation_events_consistent, describe_execution
from tests.integration.test_engine import events, finish, operations
from tests.integration.test_local_steps import crash
from workflows_app import broker, services
from agents.models import Agent
from workflows_app.models import Operation
from workflows_app.models.operation import task_id_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: How long ``B``'s message is held by the agent in the last test: longer than every timing the
#: engine's tests run with (tests/integration/conftest.py: a retry interval of 0.2 s, heartbeats
#: every second, an agent offline after 5 s) and than the period of the managers' sweep for lost
#: messages (``tick.SWEEP_EVERY_SECONDS``, 10 s), so that the sweep looks for it at least once.
HELD_SECONDS = 12.0
@pytest.fixture
def race_workflows(monkeypatch):
    """Every process of the stack (requested after this fixture) imports the workflows of these tests."""
    monkeypatch.setattr(harness, "WORKFLOW_MODULES", f"{harness.WORKFLOW_MODULES},tests.redelivery_race_workflows")


# --- helpers ------------------------------------------------------------------------------

def waiting(queue) -> int:
    """How many messages wait in ``queue``, not delivered to any consumer (a Redis list that is
    empty is no key at all: a queue that is not there holds none)."""
    with kombu.Connection(settings.CELERY_BROKER_URL) as connection:
        try:
            return connection.default_channel.queue_declare(queue=queue, passive=True).message_count
        except connection.channel_errors:
            return 0


def held_on_redis(queue) -> set:
    """The task ids of the messages a consumer took from ``queue`` and has not acknowledged, on
    Redis: kombu keeps each in its ``unacked`` hash as ``[message, exchange, routing key]``."""
    with kombu.Connection(settings.CELERY_BROKER_URL) as connection:
        channel = connection.default_channel
        entries = [json.loads(entry) for _, entry in channel.client.hscan_iter(channel.unacked_key)]
    return {message["headers"]["id"] for message, _exchange, routing_key in entries if routing_key == queue}


def attempts_run(stack, tag) -> list:
    """The attempt of each invocation of the step marked ``tag``, in the order they began."""
    return [run["attempt"] for run in stack.invocations(tag)]


def agent_ready(stack, base, concurrency):
    """A manager, and the agent ``base`` (with the test's suffix) running ``concurrency`` pool processes."""
    stack.start_manager(concurrency=2)
    name = stack.agent_name(base)
    agent = stack.start_agent(name, concurrency=concurrency)
    stack.wait_for_agent(name)
    return name, agent


def hold_b(stack, execution, name, agent) -> psutil.Process:
    """With ``A`` running in one of the agent's two pool processes, freeze the other one and let
    the workflow send ``B``: the broker delivers it to the agent, whose worker hands it to the
    frozen process, which does not start it. Returns that process (stopped)."""
    running = stack.wait_for(lambda: stack.invocations("A"), 30, "A to run", lambda: describe_execution(execution.pk))
    pool = agent.remember_descendants()
    idle = [process for process in pool if process.pid != running[0]["pid"]]
    assert len(pool) == 2 and len(idle) == 1, f"two pool processes, one of them running A: {pool}, {running}"
    idle[0].send_signal(signal.SIGSTOP)

    services.send_event(execution.pk, "go")
    b = stack.wait_for_operation(execution.pk, "B", "sent")
    # B's message was in the queue before B was recorded sent: nothing waits there any more once
    # the agent took it.
    stack.wait_for(lambda: waiting(name) == 0, 30, "the agent to take B's message")
    if broker.broker_is_redis():  # Redis can say so: the agent holds it, unacknowledged
        assert task_id_for(b.pk, 1) in held_on_redis(name)
    b.refresh_from_db()
    assert (b.state, b.attempt, stack.invocations("B")) == ("sent", 1, []), describe_execution(execution.pk)
    return idle[0]


# --- an agent restarted -------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_an_agent_restart_redelivers_what_it_held_and_nothing_runs_twice(race_workflows, stack):
    """The agent runs ``A`` (a long attempt 1) and holds ``B``'s message, delivered and not
    started, when it is SIGKILLed — its main process and its pool processes, at once — and started
    again under the same name. Both messages reach its new run again. ``B`` runs exactly once, as
    attempt 1: its held message is not lost. ``A``'s attempt 1 is lost with the run that ran it
    (a retryable failure): ``A`` runs again as attempt 2, and its attempt 1, delivered again, never
    runs a second time. The execution completes with the results of those attempts."""
    name, agent = agent_ready(stack, "host-1", concurrency=2)
    never = stack.base_dir / "never-created"  # A's attempt 1 runs until it is killed
    execution = services.start("race_held_behind", {"agent": name, "until": str(never)})
    hold_b(stack, execution, name, agent)

    crash(stack, agent)
    stack.start_agent(name, concurrency=2)

    done = finish(stack, execution, "completed")
    assert done.payload == {"A": {"tag": "A", "attempt": 2}, "B": {"tag": "B", "attempt": 1}}, \
        describe_execution(execution.pk)
    assert attempts_run(stack, "A") == [1, 2], "attempt 1, killed with its agent, then attempt 2: never 1 twice"
    assert attempts_run(stack, "A:done") == [2]
    assert attempts_run(stack, "B") == attempts_run(stack, "B:done") == [1], "B ran once, as the attempt it held"
    ops = operations(execution)
    assert {step: (op.state, op.attempt) for step, op in ops.items()} == {"A": ("succeeded", 2), "B": ("succeeded", 1)}
    lost = events(execution, "task_rescheduled", "A")
    assert [e.data.get("attempt") for e in lost] == [1], "A's attempt 1 was lost: a retryable failure"
    assert not events(execution, "task_rescheduled", "B"), "B's attempt was never lost"
    assert [e.data.get("attempt") for e in events(execution, "task_started", "B")] == [1]
    assert waiting(name) == 0, "every message delivered again was handled"
    assert_operation_events_consistent(execution)


# --- a manager restarted ------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_a_manager_restart_sends_again_and_the_duplicate_delivery_runs_nothing_twice(race_workflows, stack):
    """Two steps are sent to an agent that is down, and their messages wait in its queue. The
    manager is SIGKILLed (it and its pool processes at once), and the manager that starts sends
    every operation still ``sent`` again, under the same attempt: each attempt's message now waits
    twice. Then the agent starts, with a pool process for each of the four messages, so both
    copies of an attempt reach it at the same moment. Each step runs exactly once, as attempt 1;
    the other copy runs nothing; the execution completes."""
    manager = stack.start_manager(concurrency=2)
    name = stack.agent_name("host-1")
    agent = stack.start_agent(name, concurrency=4)
    stack.wait_for_agent(name)
    stack.stop(agent)  # its queue is there; nothing takes from it

    execution = services.start("race_side_by_side", {"agent": name, "n": 2, "seconds": 1.0})
    for step in ("s0", "s1"):
        stack.wait_for_operation(execution.pk, step, "sent")
    stack.wait_for(lambda: waiting(name) == 2, 30, "both messages to wait in the agent's queue")

    crash(stack, manager)
    stack.start_manager(concurrency=2, name="manager-2")
    stack.wait_for(lambda: waiting(name) == 4, 30, "the new manager to send both attempts again",
                   lambda: f"{waiting(name)} messages wait\n{describe_execution(execution.pk)}")
    assert {step: (op.state, op.attempt) for step, op in operations(execution).items()} == {
        "s0": ("sent", 1), "s1": ("sent", 1)}, "sent again under the same attempt"

    stack.start_agent(name, concurrency=4)
    done = finish(stack, execution, "completed")
    assert done.payload == {"results": {"s0": {"tag": "s0", "attempt": 1}, "s1": {"tag": "s1", "attempt": 1}}}, \
        describe_execution(execution.pk)
    for step in ("s0", "s1"):
        assert attempts_run(stack, step) == attempts_run(stack, f"{step}:done") == [1], \
            f"{step} ran once although its attempt was delivered twice"
        assert [e.data.get("attempt") for e in events(execution, "task_started", step)] == [1]
    assert {step: (op.state, op.attempt) for step, op in operations(execution).items()} == {
        "s0": ("succeeded", 1), "s1": ("succeeded", 1)}
    stack.wait_for(lambda: waiting(name) == 0, 30, "the second copies to be taken (and dropped) too")
    assert_operation_events_consistent(execution)


# --- a message held long after it was sent ------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_a_message_that_waited_in_the_prefetch_buffer_long_after_it_was_sent_runs_once(race_workflows, stack):
    """``B``'s message is held by the agent, delivered and not started, behind a busy agent for
    HELD_SECONDS — longer than the engine's test timings and the period of the managers' sweep for
    lost messages — and, as far as the managers know, since a minute (its time of sending moved
    back: the sweep sends again a ``sent`` operation whose message is nowhere after 30 s). All
    that time ``B`` stays ``sent``, unstarted, and is not sent again: no second message waits for
    the agent. When its pool process goes on, ``B`` runs once, as attempt 1, and its result is
    stored; ``A`` finishes, and the execution completes."""
    release = stack.base_dir / "release-A"
    name, agent = agent_ready(stack, "host-1", concurrency=2)
    execution = services.start("race_held_behind", {"agent": name, "until": str(release)})
    frozen = hold_b(stack, execution, name, agent)
    b = Operation.objects.get(execution_id=execution.pk, name="B")
    # As if it had been sent a minute ago, without the test waiting for it.
    Operation.objects.filter(pk=b.pk).update(sending_at=timezone.now() - timedelta(minutes=1))

    until = time.monotonic() + HELD_SECONDS
    while time.monotonic() < until:
        b.refresh_from_db()
        assert (b.state, b.attempt, stack.invocations("B")) == ("sent", 1, []), describe_execution(execution.pk)
        assert waiting(name) == 0, "B's message, held by the agent, was sent again"
        stack.check_processes()
        time.sleep(0.2)

    frozen.send_signal(signal.SIGCONT)
    stack.wait_for_operation(execution.pk, "B", ["succeeded", "failed", "cancelled"])
    release.touch()
    done = finish(stack, execution, "completed")
    assert done.payload == {"A": {"tag": "A", "attempt": 1}, "B": {"tag": "B", "attempt": 1}}, \
        describe_execution(execution.pk)
    assert attempts_run(stack, "B") == attempts_run(stack, "B:done") == [1]
    assert attempts_run(stack, "A") == attempts_run(stack, "A:done") == [1]
    assert [e.data.get("attempt") for e in events(execution, "task_started", "B")] == [1]
    assert not events(execution, "task_rescheduled"), "nothing was lost"
    assert waiting(name) == 0
    assert_operation_events_consistent(execution)


# --- an agent slow to start ----------------------------------------------------------------------

#: How long the agent's run is frozen right after its registration: longer than the tests'
#: AGENT_OFFLINE_AFTER_SECONDS (5 s, tests/integration/conftest.py).
SLOW_START_SECONDS = 7.0


@pytest.mark.django_db(transaction=True)
def test_an_agent_slow_to_start_after_it_registered_is_not_taken_for_offline_as_it_claims(race_workflows, stack):
    """A step's message waits for its agent; the agent starts again and registers, then its
    worker is slow to get going (frozen, SIGSTOP, for longer than AGENT_OFFLINE_AFTER_SECONDS):
    once it goes on, it claims the waiting attempt before its first heartbeat. The claim says
    that its run is alive: the attempt it started is not declared lost ("went offline") while it
    runs, and the step runs once, as attempt 1."""
    stack.start_manager(concurrency=2)
    name = stack.agent_name("host-1")
    agent = stack.start_agent(name, concurrency=1)
    stack.wait_for_agent(name)
    stack.stop(agent)
    execution = services.start("race_side_by_side", {"agent": name, "n": 1, "seconds": 2.0})
    stack.wait_for_operation(execution.pk, "s0", "sent")

    launched = timezone.now()
    agent = stack.start_agent(name, concurrency=1)
    stack.wait_for(lambda: Agent.objects.filter(name=name, started_at__gte=launched).exists(), 30,
                   f"the new run of {name} to register")
    processes = agent.remember_descendants()
    os.killpg(agent.pid, signal.SIGSTOP)
    for process in processes:
        process.send_signal(signal.SIGSTOP)
    time.sleep(SLOW_START_SECONDS)
    for process in agent.remember_descendants():
        process.send_signal(signal.SIGCONT)
    os.killpg(agent.pid, signal.SIGCONT)

    done = finish(stack, execution, "completed")
    assert done.payload == {"results": {"s0": {"tag": "s0", "attempt": 1}}}, describe_execution(execution.pk)
    assert attempts_run(stack, "s0") == [1], "the attempt ran once: it was not lost while it ran"
    assert not events(execution, "task_rescheduled"), describe_execution(execution.pk)
    assert_operation_events_consistent(execution)
