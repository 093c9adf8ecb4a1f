"""What RabbitMQ changes, proven on a RabbitMQ node of the test's own (``rabbitmq.py``) with a
real manager and real agents: durable queues keep what they hold across a broker restart; an
operation that outlives the broker's ``consumer_timeout`` neither runs twice nor loses its result;
quorum queues (a documented option: ``CELERY_QUEUE_TYPE=quorum``) run retries, a cancel and a kill.

The rest of the suite proves the rest on RabbitMQ when the configured broker is one (CI's
set-up 3): remote control over its fanout exchanges — the kill (``test_stopping.py``) and the
reconciliation a starting manager asks for (``test_restart.py``) — among the rest.

The test process keeps the configured broker: what the tests start, cancel and kill on the node
they do with ``manage.py`` commands pointed at it, as a user of that broker would.
"""

import re
import shlex

import kombu
import pytest
from django.conf import settings

from tests.conftest import REQUIRED
from tests.integration import rabbitmq
from tests.integration.harness import NO_DATABASE_URL, assert_operation_events_consistent, describe_execution
from tests.integration.test_engine import finish, gone, operations
from workflows_app.models import Event, Execution, Operation

pytestmark = pytest.mark.integration

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
#: The node's consumer_timeout in test (b): RabbitMQ's default is 30 minutes.
CONSUMER_TIMEOUT_MS = 3000


@pytest.fixture
def own_rabbitmq(tmp_path):
    """Starts RabbitMQ nodes of the test's own (``own_rabbitmq(**options)``); none outlives the
    test. They run where RabbitMQ is the configured broker (CI's set-up 3: these tests say what
    RabbitMQ changes, and the other set-ups need not repeat them). Without RabbitMQ's scripts on
    the machine the test is skipped, or fails when SWITCHYARD_REQUIRE names rabbitmq (CI)."""
    if not settings.CELERY_BROKER_URL.startswith(("amqp://", "amqps://", "pyamqp://")):
        pytest.skip("RabbitMQ's own tests run where RabbitMQ is the broker (CELERY_BROKER_URL=amqp://…)")
    if not rabbitmq.available():
        if "rabbitmq" in REQUIRED:
            pytest.fail("SWITCHYARD_REQUIRE names rabbitmq, but rabbitmq-server and rabbitmqctl are not installed")
        pytest.skip("needs RabbitMQ's rabbitmq-server and rabbitmqctl")
    nodes = []

    def start(**options):
        node = rabbitmq.RabbitMQNode(tmp_path / f"rabbitmq-{len(nodes) + 1}", **options)
        nodes.append(node)
        return node.start()

    try:
        yield start
    finally:
        for node in nodes:
            node.close()


# --- processes on the node --------------------------------------------------------------------

def on_node(node, **variables) -> dict:
    """The environment of a process that uses ``node`` as its broker, and no result backend:
    Switchyard's results are in the database, and settings.py configures none for a RabbitMQ
    broker (``Stack.use_broker`` would make the broker the result backend too, which only a Redis
    can be; an empty CELERY_RESULT_BACKEND is the settings' default)."""
    return {"CELERY_BROKER_URL": node.url, "CELERY_RESULT_BACKEND": "", **variables}


class OnNode:
    """Starts a stack's processes on ``node`` (with ``variables`` more in their environment)."""

    def __init__(self, stack, node, **variables):
        self.stack, self.node, self.env = stack, node, on_node(node, **variables)

    def manager(self, concurrency=4, name="manager"):
        return self.stack.manage(name, "run_manager", "--concurrency", str(concurrency), "--loglevel", "INFO",
                                 env=self.env)

    def agent(self, base, concurrency=2):
        """``run_agent`` for the agent ``base`` plus the test's suffix (not awaited)."""
        name = self.stack.agent_name(base)
        return self.stack.manage(name, "run_agent", name, "--concurrency", str(concurrency), "--loglevel", "INFO",
                                 env=self.env)

    def command(self, name, *args, timeout=60) -> str:
        """``manage.py *args`` to its end; what it printed (it must succeed)."""
        proc = self.stack.manage(name, *args, env=self.env, expect_exit=True)
        proc.wait(timeout=timeout)
        output = proc.log_text().split("\n", 1)[1]
        assert proc.returncode == 0, output
        return output

    def start(self, workflow, *params, failure_mode=None) -> Execution:
        """``start_execution workflow --param …``: the execution it started."""
        args = ["start_execution", workflow, *[arg for param in params for arg in ("--param", param)]]
        if failure_mode:
            args += ["--failure-mode", failure_mode]
        output = self.command(f"start-{workflow}", *args)
        return Execution.objects.get(pk=[word for word in output.split() if UUID.match(word)][0])

    def cancel(self, execution, *how):
        """``cancel_execution ID [--force | --kill]``."""
        return self.command("cancel", "cancel_execution", str(execution.pk), *how)


def cancel_and_kill(stack, on, host):
    """An ``it_stoppable`` cancelled — its running step sees ``ctx.is_cancelled()`` and returns, the
    step after it never starts — and an ``it_stubborn_wf`` killed: its process and the sleep it
    started are gone, the step ``cancelled`` with "killed". Both executions, ended."""
    cancelled = on.start("it_stoppable", f"agent={host}")
    stack.wait_for(lambda: ran(stack, "running"), 30, "the operation to run")
    on.cancel(cancelled)
    finish(stack, cancelled, "cancelled")
    assert stack.invocations("running-saw-cancel"), "the cancel reached ctx.is_cancelled()"
    assert operations(cancelled)["running"].state == "succeeded", "it saw the cancel and returned"
    assert ran(stack, "after") == 0

    killed = on.start("it_stubborn_wf", f"agent={host}")
    run = stack.wait_for(lambda: stack.invocations("stubborn"), 30, "the operation to start its sleep")[0]
    on.cancel(killed, "--kill")
    stack.wait_for(lambda: gone(run["pid"]) and gone(run["child"]), stack.workflows["KILL_GRACE_SECONDS"] + 5,
                   "the operation's process and its sleep to be gone")
    finish(stack, killed, "cancelled")
    stubborn = Operation.objects.get(execution_id=killed.pk, name="stubborn")
    assert (stubborn.state, stubborn.error["message"]) == ("cancelled", "killed")
    return cancelled, killed


def ran(stack, tag) -> int:
    return len(stack.invocations(tag))


def delivered_twice(execution) -> set:
    """The steps of which an agent or manager got a message it dropped (fencing records each)."""
    return set(Event.objects.filter(execution_id=execution.pk, type="log", data__fenced=True)
               .values_list("operation", flat=True))


# --- (a) durable queues ---------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_messages_waiting_for_an_agent_survive_a_broker_restart_and_every_step_runs_once(own_rabbitmq, stack):
    """RabbitMQ keeps its durable queues and their persistent messages across a restart (a Redis
    without persistence loses them, and the engine sends them again: ``test_restart.py``). Here
    the messages wait for agents that are not running, and an operation runs on the manager
    while the broker goes away and comes back."""
    node = own_rabbitmq()
    on = OnNode(stack, node)
    manager = on.manager()
    h1, h2 = stack.agent_name("host-1"), stack.agent_name("host-2")
    execution = on.start("it_restart", f'agents=["{h1}","{h2}"]', "seconds=12", "chain=2", "wide=3",
                         "step_seconds=0.2")
    # slow-agent, w0-w2 and c0 wait in host-1's queue, no agent runs; slow-manager runs.
    stack.wait_for(lambda: node.queues().get(h1, {}).get("messages") == 5, 60, "five messages in host-1's queue",
                   lambda: f"{node.queues()}\n{describe_execution(execution.pk)}")
    stack.wait_for(lambda: ran(stack, "slow-manager"), 30, "slow-manager to run on the manager")
    assert node.queues()[h1]["durable"]

    node.restart()
    assert node.queues()[h1]["messages"] == 5, "the messages are still there"

    on.agent("host-1")
    on.agent("host-2")
    finish(stack, execution, "completed", timeout=120)
    ops = operations(execution)
    assert {op.state for op in ops.values()} == {"succeeded"}, describe_execution(execution.pk)
    twice = {name: ran(stack, f"{name}:done") for name in ops if ran(stack, f"{name}:done") != 1}
    assert not twice, f"steps that did not finish exactly once: {twice}"
    assert {name: op.attempt for name, op in ops.items() if op.attempt != 1} == {}
    # What waited in the broker was delivered from it, nothing was sent again; only the message
    # of slow-manager, unacknowledged when the broker went, came back once more, and was dropped.
    assert delivered_twice(execution) <= {"slow-manager"}
    assert manager.alive(), "the manager rode out the broker restart"
    assert_operation_events_consistent(execution)


# --- (b) consumer_timeout -------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("concurrency", [2, 1])  # with 1, the message delivered again waits behind the operation
def test_an_operation_longer_than_the_consumer_timeout_runs_once_and_keeps_its_result(own_rabbitmq, stack, concurrency):
    """RabbitMQ closes the channel of a consumer that holds a delivery unacknowledged longer than
    ``consumer_timeout`` (30 minutes by default) and delivers the message again. Switchyard
    acknowledges late, so a long operation meets that: the operation must run on, its result be
    recorded once, the redelivery be refused by fencing, and the agent go on taking work (by
    itself, Celery ends the worker once that operation is over: ``agents.worker.pool.prepare``)."""
    node = own_rabbitmq(consumer_timeout_ms=CONSUMER_TIMEOUT_MS)
    on = OnNode(stack, node)
    on.manager()
    agent = on.agent("host-1", concurrency=concurrency)
    host = stack.agent_name("host-1")
    stack.wait_for_agent(host)
    seconds = 4 * CONSUMER_TIMEOUT_MS / 1000
    # first (quick), running (it_wait_cancel, `seconds` long), then after: all on host-1.
    execution = on.start("it_stoppable", f"agent={host}", f"seconds={seconds}")

    finish(stack, execution, "completed", timeout=seconds + 60)
    assert "timed out waiting for delivery acknowledgement" in node.log_text(), \
        "the broker's consumer timeout closed the agent's channel"
    assert agent.alive(), "the agent lives on"
    ops = operations(execution)
    assert (ops["running"].state, ops["running"].attempt, ops["running"].result) == ("succeeded", 1, "finished")
    assert ran(stack, "running") == 1, "the operation ran once"
    assert delivered_twice(execution) == {"running"}, "its message came again, and fencing dropped it"
    assert Event.objects.filter(execution_id=execution.pk, operation="running", type="task_succeeded").count() == 1
    assert ran(stack, "after") == 1, "the agent took the next operation"
    # The redelivered message was refused and acknowledged: nothing is left in the queue.
    stack.wait_for(lambda: node.queues()[host]["messages"] == 0, 30, "host-1's queue to be empty", node.queues)
    assert_operation_events_consistent(execution)


# --- (d) quorum queues ------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_with_quorum_queues_retries_a_cancel_and_a_kill_work(own_rabbitmq, stack):
    """``CELERY_QUEUE_TYPE=quorum``: every queue Switchyard's processes declare — the management
    queue, each agent's — is a quorum queue (RabbitMQ's replicated queue type), and an execution
    with retries, a cancel and a kill behave as on classic queues."""
    node = own_rabbitmq()
    on = OnNode(stack, node, CELERY_QUEUE_TYPE="quorum")
    on.manager()
    on.agent("host-1")
    host = stack.agent_name("host-1")
    stack.wait_for_agent(host)

    retried = on.start("it_retries", f"agent={host}", failure_mode="continue_while_possible")
    finish(stack, retried, "failed")
    ops = operations(retried)
    assert (ops["flaky"].state, ops["flaky"].attempt, ran(stack, "flaky")) == ("succeeded", 3, 3)
    assert (ops["retry_for"].state, ran(stack, "retry_for")) == ("failed", 3)
    assert (ops["nonrecoverable"].state, ran(stack, "nonrecoverable")) == ("failed", 1)

    cancelled, killed = cancel_and_kill(stack, on, host)

    queues = node.queues()
    assert queues[stack.management_queue]["type"] == "quorum", queues
    assert queues[host]["type"] == "quorum", queues
    for execution in (retried, cancelled, killed):
        assert_operation_events_consistent(execution)


# --- (e) an agent's own account ----------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_an_agent_with_an_account_of_its_own_works_and_may_do_nothing_else(own_rabbitmq, stack):
    """An agent whose RabbitMQ account has only the permissions ``rabbitmq_agent_account`` prints
    (and no database) runs operations, hears a cancel and a kill; with that account nobody can
    publish to the managers' queue or another agent's, read the reports, or broadcast a kill."""
    node = own_rabbitmq()
    on = OnNode(stack, node)
    host = stack.agent_name("host-1")
    printed = on.command("account", "rabbitmq_agent_account", host, "--user", "agent-1").splitlines()
    assert printed[0].startswith("rabbitmqctl add_user agent-1 ")
    node.ctl("add_user", "agent-1", "its-password")
    node.ctl(*shlex.split(printed[1])[1:])  # set_permissions -p / agent-1 <configure> <write> <read>
    own_url = node.url.replace(f"{node.user}:{node.password}@", "agent-1:its-password@")
    on.manager()
    stack.manage(host, "run_agent", host, "--concurrency", "2", "--loglevel", "INFO",
                 env={**on.env, "CELERY_BROKER_URL": own_url, "DATABASE_URL": NO_DATABASE_URL})
    stack.wait_for_agent(host)

    done = on.start("it_retries", f"agent={host}", failure_mode="continue_while_possible")
    finish(stack, done, "failed")
    assert operations(done)["flaky"].state == "succeeded" and ran(stack, "flaky") == 3, "outcomes and retries reported"

    cancelled, killed = cancel_and_kill(stack, on, host)

    refused = []
    for attempt in (lambda c: c.default_channel.basic_publish(c.default_channel.prepare_message(b"{}"),
                                                              exchange=stack.management_queue, routing_key=stack.management_queue),
                    lambda c: c.default_channel.basic_publish(c.default_channel.prepare_message(b"{}"),
                                                              exchange="", routing_key=f"{stack.management_queue}.reports"),
                    lambda c: c.default_channel.basic_publish(c.default_channel.prepare_message(b"{}"),
                                                              exchange="celery.pidbox", routing_key=""),
                    lambda c: c.default_channel.basic_get(f"{stack.management_queue}.reports"),
                    lambda c: c.default_channel.basic_get(stack.management_queue)):
        with kombu.Connection(own_url) as connection:
            try:
                attempt(connection)
                connection.default_channel.basic_qos(0, 1, False)  # a round trip: a refusal closes the channel first
            except connection.channel_errors + connection.connection_errors as exc:
                refused.append("ACCESS_REFUSED" in str(exc) or "access" in str(exc).lower())
            else:
                refused.append(False)
    assert refused == [True] * 5, refused
    for execution in (done, cancelled, killed):
        assert_operation_events_consistent(execution)
