"""An operation's message that an agent holds, or that waits for it, while its execution is stopped
or resumed: what a user relies on whatever the agent does with the delivery.

* A cancel (or kill) of the execution while the agent holds the message unstarted: the attempt
  never starts, and the execution ends ``cancelled``.
* A force-cancel and force-resume while attempt 1's message waits (in the queue, behind a busy
  operation, or held by the agent): attempt 1 never starts, attempt 2 runs once, the execution
  completes.
* A cancel while the agent, frozen with the message, has lost its broker connections (it misses
  the stop broadcast altogether): once it runs again and reconnects, it never starts the attempt.

How an agent comes to hold a message unstarted. Its worker takes one message per pool process
and acknowledges it late, so an agent of concurrency 1 busy with one operation leaves the next
one's message in the queue (no prefetch buffer holds it). The race is made as it happens instead:
the agent's pool process is frozen (SIGSTOP) while its main process goes on consuming; the
broker hands the main process the message (the queue is empty, the operation still ``sent``, the
worker logs it received), which passes it to the frozen pool process; then the main process is
frozen too, the execution is stopped, and the agent is let go — its pool process first, so that
the held delivery is free to begin before the main process has read anything the managers said
meanwhile.

That the agent is done with a held (or queued) delivery is told by what follows it: the agent has
one pool process, which takes its jobs in order, and takes a message from the broker only once
the one before is acknowledged, so an operation that runs on it after the held one was delivered
runs after the held delivery was dealt with. Operations count their real invocations in marker
files (``stack.invocations(tag)``, with the attempt number).
"""

import contextlib
import os
import signal
import subprocess
from urllib.parse import urlparse

import psutil
import pytest
from django.conf import settings

from tests.integration.harness import assert_operation_events_consistent, describe_execution
from tests.integration.test_engine import events, finish
from tests.integration.test_stopping import queue_length
from workflows_app import broker, services
from workflows_app.engine import grants
from workflows_app.models import Execution, Operation
from workflows_app.models.operation import task_id_for
from workflows_app.states import OperationState

pytestmark = pytest.mark.integration


# --- helpers ------------------------------------------------------------------------------

#: The grant of the messages here: an execution stopped while its agent is frozen ends once the
#: grant of what the agent holds expired (the agent cannot answer the stop), and the agent, let go,
#: claims what it holds (expired) rather than run it.
GRANT_SECONDS = 4


def up(stack, *, agent=True):
    """A manager and the agent ``host-1`` (concurrency 1: one pool process), ready; returns the
    agent's name and process (None with ``agent=False``: its messages wait in its queue)."""
    stack.configure(GRANT_SECONDS=GRANT_SECONDS)
    stack.start_manager(concurrency=2)
    name = stack.agent_name("host-1")
    if not agent:
        return name, None
    process = stack.start_agent(name, concurrency=1)
    stack.wait_for_agent(name)
    return name, process


def pool_of(agent) -> list[psutil.Process]:
    """The agent's pool processes and what runs below them (each leads a process group of its own)."""
    return [p for p in agent.remember_descendants() if _alive(p)]


def _alive(process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _signal(processes, sig):
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(sig)


@contextlib.contextmanager
def frozen_pool(agent):
    """The agent's pool processes frozen (SIGSTOP), its main process running; let go on leaving."""
    pool = pool_of(agent)
    assert pool, f"{agent.describe()} has no pool process"
    _signal(pool, signal.SIGSTOP)
    try:
        yield pool
    finally:
        _signal(pool, signal.SIGCONT)


@contextlib.contextmanager
def frozen_main(agent):
    """The agent's main process group frozen too; on leaving, its pool processes are let go first,
    then the main process: the held delivery may begin before anything else the agent reads."""
    os.killpg(agent.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        _signal(pool_of(agent), signal.SIGCONT)
        os.killpg(agent.pid, signal.SIGCONT)


def held_by(stack, agent, name, execution, step="long") -> Operation:
    """Wait until the agent's main process holds the current attempt's message of ``step``: the
    broker handed it over (the queue is empty), the worker logged it received, and nothing
    started it (the operation is still ``sent``). Its pool process must be frozen."""
    op = stack.wait_for_operation(execution.pk, step, "sent")
    received = f"[{task_id_for(op.pk, op.attempt)}] received"  # Celery's "Task <name>[<task id>] received"
    stack.wait_for(lambda: received in agent.log_text(), 30, f"{agent.name} to receive attempt {op.attempt} of {step}",
                   lambda: describe_execution(execution.pk))
    assert queue_length(name) == 0, "the message left the queue"
    op.refresh_from_db()
    assert op.state == OperationState.SENT, describe_execution(execution.pk)
    return op


def dealt_with(stack, name, tag="next"):
    """Run one more operation on the agent and wait for it: its single pool process ran it after
    every delivery it held or took before."""
    following = services.start("it_single", {"agent": name, "tag": tag, "seconds": 0.0})
    finish(stack, following, "completed")


def never_started(stack, execution, tag, step="long"):
    """The step of ``execution`` never ran: no invocation, no ``task_started``, ``cancelled``."""
    assert stack.invocations(tag) == [], "the held attempt ran"
    assert events(execution, "task_started") == []
    op = Operation.objects.get(execution_id=execution.pk, name=step)
    assert op.state == "cancelled", describe_execution(execution.pk)
    assert Execution.objects.get(pk=execution.pk).status == "cancelled"
    assert_operation_events_consistent(execution)


def release(stack, tag):
    """Mark ``tag`` as a test operation would: a step waiting ``after`` it goes on."""
    path = stack.markers_dir / tag
    with open(path, "a") as markers:
        markers.write('{"released": true}\n')


# --- cutting an agent's broker connections ----------------------------------------------------

def broker_port() -> int:
    url = urlparse(settings.CELERY_BROKER_URL)
    return url.port or (6379 if url.scheme.startswith("redis") else 5672)


def connections_of(agent) -> set[str]:
    """``host:port`` of every TCP connection of the agent's processes to the broker, at its end."""
    port = broker_port()
    ends = set()
    for process in [psutil.Process(agent.pid), *pool_of(agent)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            ends |= {f"{c.laddr.ip}:{c.laddr.port}" for c in process.net_connections(kind="tcp")
                     if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED}
    return ends


def cut(ends) -> int:
    """Close, at the broker, its connections from ``ends`` (``host:port``); returns how many it closed."""
    if broker.broker_is_redis():
        import redis

        client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        return sum(client.client_kill_filter(_id=each["id"]) for each in client.client_list() if each["addr"] in ends)
    listed = subprocess.run(["rabbitmqctl", "-q", "list_connections", "pid", "peer_host", "peer_port"],
                            capture_output=True, text=True, check=True, timeout=60).stdout.splitlines()
    pids = [fields[0] for fields in map(str.split, listed) if len(fields) == 3 and f"{fields[1]}:{fields[2]}" in ends]
    # At once: each rabbitmqctl starts an Erlang VM of its own, and the agent is frozen meanwhile.
    closing = [subprocess.Popen(["rabbitmqctl", "-q", "close_connection", pid, "cut by the test"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for pid in pids]
    return sum(1 for each in closing if each.wait(timeout=60) == 0)


def cuttable() -> bool:
    """Whether the test can close an agent's connections at the broker: it finds them by their
    TCP ports (a Unix socket's clients all have one address), on RabbitMQ with rabbitmqctl."""
    if urlparse(settings.CELERY_BROKER_URL).scheme.endswith("+socket"):
        return False
    if broker.broker_is_redis():
        return True
    try:
        return subprocess.run(["rabbitmqctl", "-q", "list_connections", "pid"], capture_output=True,
                              timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# --- a cancel while the agent holds the message ---------------------------------------------------

@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("stop", ["cancel", "kill"])
def test_a_cancel_while_the_agent_holds_the_message_unstarted_never_starts_it(stack, stop):
    """The agent holds the operation's message, unstarted; the whole agent is frozen; the
    execution is cancelled (or killed); the agent is let go, its pool process first. The attempt
    never runs and has no ``task_started``; the operation and the execution end ``cancelled``,
    their events in order."""
    name, agent = up(stack)
    with frozen_pool(agent):
        execution = services.start("it_single", {"agent": name, "tag": "held", "seconds": 0.0})
        held_by(stack, agent, name, execution)
        with frozen_main(agent):
            # It ends once the grant of what the frozen agent holds expired: the agent cannot answer.
            assert getattr(services, stop)(execution.pk).status in ("cancelling", "kill_cancelling", "cancelled")
            stack.wait_for_status(execution.pk, "cancelled", timeout=GRANT_SECONDS + 10)

    dealt_with(stack, name)
    never_started(stack, execution, "held")


# --- a force-resume while the old attempt's message waits -----------------------------------------

@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("where", ["in-the-queue-of-an-agent-not-started", "in-the-queue-behind-a-busy-operation",
                                   "held-by-the-agent"])
def test_a_force_resume_while_the_old_attempts_message_waits_runs_only_the_new_attempt(stack, where):
    """Attempt 1's message waits — in the queue of an agent not started yet, in the queue behind an
    operation that keeps the agent's one pool process busy, or held (delivered, unstarted) by the
    frozen agent; the execution is force-cancelled, then force-resumed: the step gets attempt 2,
    whose message comes after attempt 1's. Then the agent gets to both. Attempt 1 never starts;
    attempt 2 runs exactly once; the execution completes, its events in order."""
    name, agent = up(stack, agent=where != "in-the-queue-of-an-agent-not-started")
    with contextlib.ExitStack() as frozen:
        if where == "in-the-queue-behind-a-busy-operation":
            busy = services.start("it_single", {"agent": name, "tag": "busy", "seconds": 0.0, "after": "release"})
            stack.wait_for_operation(busy.pk, "long", "started")
        if where == "held-by-the-agent":
            frozen.enter_context(frozen_pool(agent))
        execution = services.start("it_single", {"agent": name, "tag": "twice", "seconds": 0.0})
        if where == "held-by-the-agent":
            first = held_by(stack, agent, name, execution)
            frozen.enter_context(frozen_main(agent))
        else:
            first = stack.wait_for_operation(execution.pk, "long", "sent")
            assert queue_length(name) == 1, "attempt 1's message waits in the queue"
        assert first.attempt == 1

        # Ended at once, or once the grant of what the frozen agent holds expired.
        assert services.force_cancel(execution.pk).status in ("force_cancelling", "cancelled")
        stack.wait_for_status(execution.pk, "cancelled", timeout=GRANT_SECONDS + 10)
        assert services.force_resume(execution.pk).status == "started"
        second = stack.wait_for(lambda: Operation.objects.filter(pk=first.pk, attempt=2, state="sent").first(), 30,
                                "attempt 2 to be sent", lambda: describe_execution(execution.pk))
        if where != "held-by-the-agent":
            assert queue_length(name) == 2, "both attempts' messages wait in the queue"
    # The agent gets to them: let go (held), started (not started), or done with the busy step.
    if where == "in-the-queue-of-an-agent-not-started":
        stack.start_agent(name, concurrency=1)
    if where == "in-the-queue-behind-a-busy-operation":
        release(stack, "release")
        finish(stack, busy, "completed")

    finish(stack, execution, "completed")
    runs = stack.invocations("twice")
    assert [run["attempt"] for run in runs] == [2], f"only attempt 2 ran: {runs}"
    second.refresh_from_db()
    assert (second.state, second.attempt, second.result) == ("succeeded", 2, "twice")
    started = events(execution, "task_started", "long")
    assert [event.data.get("attempt") for event in started] == [2], describe_execution(execution.pk)
    dealt_with(stack, name)
    assert len(stack.invocations("twice")) == 1, "nothing ran the step again"
    assert_operation_events_consistent(execution)


# --- an agent that missed the stop broadcast -----------------------------------------------------

@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not cuttable(), reason="cutting an agent's connections takes a broker over TCP (and rabbitmqctl "
                                            "on RabbitMQ): the set-ups with one run it")
def test_an_agent_that_missed_the_stop_broadcast_while_disconnected_never_starts_the_cancelled_attempt(stack):
    """The agent holds the operation's message, unstarted, and is frozen; the broker closes every
    connection of it (its consumer, its remote-control listener, its pool process' line to the
    managers), so that it hears nothing of the cancel that follows; the agent is let go, its pool
    process first, and reconnects. The attempt never runs and has no ``task_started``; the
    operation and the execution end ``cancelled``; the agent runs the next operation."""
    name, agent = up(stack)
    with frozen_pool(agent):
        execution = services.start("it_single", {"agent": name, "tag": "held", "seconds": 0.0})
        held_by(stack, agent, name, execution)
        with frozen_main(agent):
            ends = connections_of(agent)
            assert ends, f"{agent.describe()} has no connection to the broker"
            assert cut(ends) == len(ends), f"the broker closed every connection of the agent: {sorted(ends)}"
            assert services.cancel(execution.pk).status in ("cancelling", "cancelled")
            stack.wait_for_status(execution.pk, "cancelled", timeout=30)

    dealt_with(stack, name)  # it reconnected: it runs the next operation
    never_started(stack, execution, "held")


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not cuttable(), reason="cutting an agent's connections takes a broker over TCP (and rabbitmqctl "
                                            "on RabbitMQ): the set-ups with one run it")
def test_an_agent_back_on_the_broker_never_starts_what_was_cancelled_while_it_was_away(stack):
    """The agent is frozen and the broker closes every connection of it; meanwhile an operation is
    sent to it and cancelled — the stop is broadcast to nobody. The agent is let go and reconnects
    while the message's grant still runs, and the broker delivers it the message, for the first
    time: it was granted before the agent's connection, so the agent asks (and is told no) rather
    than run it. The attempt never runs; the execution ends ``cancelled`` without waiting for the
    grant to expire."""
    stack.configure(GRANT_SECONDS=60)  # far longer than the test: the grant runs when the agent is back
    stack.start_manager(concurrency=2)
    name = stack.agent_name("host-1")
    agent = stack.start_agent(name, concurrency=1)
    stack.wait_for_agent(name)
    with frozen_main(agent):
        ends = connections_of(agent)
        assert ends and cut(ends) == len(ends), f"the broker closed every connection of the agent: {sorted(ends)}"
        execution = services.start("it_single", {"agent": name, "tag": "away", "seconds": 0.0})
        stack.wait_for_operation(execution.pk, "long", "sent")
        assert services.cancel(execution.pk).status == "cancelling", "the agent did not answer: its grant is awaited"

    dealt_with(stack, name)  # it reconnected, and took the message before the next one
    stack.wait_for_status(execution.pk, "cancelled", timeout=30)
    never_started(stack, execution, "away")


@pytest.mark.django_db(transaction=True)
def test_a_granted_message_delivered_twice_at_once_runs_once(stack):
    """The broker holds an attempt's message twice (the manager's, and the same message published
    again); the agent, frozen meanwhile, is let go and takes both at once, into its two pool
    processes: both deliveries are first deliveries of a live grant. The attempt runs once (its
    agent's journal takes it once), has one ``task_started``, and the execution completes."""
    stack.configure(GRANT_SECONDS=60)
    stack.start_manager(concurrency=2)
    name = stack.agent_name("host-1")
    agent = stack.start_agent(name, concurrency=2)
    stack.wait_for_agent(name)
    with frozen_main(agent):
        execution = services.start("it_single", {"agent": name, "tag": "twice", "seconds": 1.0})
        op = stack.wait_for_operation(execution.pk, "long", "sent")
        broker.send_operations([op], grants.grants([op]))  # the same attempt, the same grant, again

    finish(stack, execution, "completed")
    dealt_with(stack, name)
    assert [run["attempt"] for run in stack.invocations("twice")] == [1], "the attempt ran once"
    assert len(events(execution, "task_started", "long")) == 1
    assert_operation_events_consistent(execution)
