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

import json
import re
import shlex
from urllib.parse import quote, urlsplit, urlunsplit

import kombu
import pytest
from amqp.exceptions import AccessRefused
from django.conf import settings

from agents.models import Agent
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

#: The virtual host the account tests make on their node (an account's permissions are per vhost).
ACCOUNT_VHOST = "switchyard-accounts"


def with_vhost(url, vhost) -> str:
    """``url`` (a node's, on its default vhost) on the virtual host ``vhost``."""
    return urlunsplit(urlsplit(url)._replace(path="/" + quote(vhost, safe="")))


def agent_account(on, node, agent, user) -> str:
    """Make the vhost ACCOUNT_VHOST (the node's own user may do anything there) and, in it, the
    account ``rabbitmq_agent_account agent --user user --vhost …`` prints; the account's URL."""
    node.ctl("add_vhost", ACCOUNT_VHOST)
    node.ctl("set_permissions", "-p", ACCOUNT_VHOST, node.user, ".*", ".*", ".*")
    printed = on.command("account", "rabbitmq_agent_account", agent, "--user", user, "--vhost", ACCOUNT_VHOST).splitlines()
    assert printed[0].startswith(f"rabbitmqctl add_user {user} ")
    node.ctl("add_user", user, "its-password")
    node.ctl(*shlex.split(printed[1])[1:])  # set_permissions -p <vhost> <user> <configure> <write> <read>
    return with_vhost(node.url, ACCOUNT_VHOST).replace(f"{node.user}:{node.password}@", f"{user}:its-password@")


def shared_entities(management_queue, other):
    """What every agent and manager shares, as the managers and Celery declare it (exchanges by
    name, queues by name), and what another agent ``other`` owns: the administrator's."""
    reports = f"{management_queue}.reports"
    exchanges = {
        "celery.pidbox": kombu.Exchange("celery.pidbox", "fanout", durable=False),  # kills, cancels, questions
        "reply.celery.pidbox": kombu.Exchange("reply.celery.pidbox", "direct", durable=False),  # their answers
        "celeryev": kombu.Exchange("celeryev", "topic", durable=True),  # task and worker events
        f"{management_queue}.reporting": kombu.Exchange(f"{management_queue}.reporting", "direct", durable=True),
        management_queue: kombu.Exchange(management_queue, "direct", durable=True),
        other: kombu.Exchange(other, "direct", durable=True),
    }
    queues = {
        management_queue: kombu.Queue(management_queue, exchanges[management_queue], routing_key=management_queue),
        reports: kombu.Queue(reports, exchanges[f"{management_queue}.reporting"], routing_key=reports),
        other: kombu.Queue(other, exchanges[other], routing_key=other),
        f"{other}.replies.box.42": kombu.Queue(f"{other}.replies.box.42", durable=False),
        f"{other}@box.celery.pidbox": kombu.Queue(f"{other}@box.celery.pidbox", exchanges["celery.pidbox"],
                                                  durable=False),
        # A manager's (or Flower's) reply queue, where every worker's answers to its question go.
        "1f2e3d4c.reply.celery.pidbox": kombu.Queue("1f2e3d4c.reply.celery.pidbox", exchanges["reply.celery.pidbox"],
                                                    routing_key="1f2e3d4c", durable=False),
    }
    return exchanges, queues


def attempt(connection, what) -> str:
    """``what(channel)`` on a fresh channel of ``connection``, then a round trip (the broker
    refuses a publish by closing the channel, after the publish returned): "refused" for
    ACCESS_REFUSED, "done", or the other error."""
    channel = connection.channel()
    try:
        what(channel)
        channel.basic_qos(0, 1, False)
    except AccessRefused:
        return "refused"
    except connection.channel_errors + connection.connection_errors as exc:
        return f"{type(exc).__name__}: {exc}"
    try:
        channel.close()
    except Exception:  # noqa: BLE001 — only closing it
        pass
    return "done"


def publish(exchange, routing_key):
    return lambda channel: channel.basic_publish(channel.prepare_message(b"{}"), exchange=exchange,
                                                 routing_key=routing_key)


@pytest.mark.django_db(transaction=True)
def test_an_agents_own_account_may_change_and_read_nothing_shared(own_rabbitmq, stack):
    """With the account ``rabbitmq_agent_account`` prints, from outside any agent, nobody can
    delete or declare what the managers and agents share — the remote-control exchanges, the
    events', the reports', the management queue, the reports queue, another agent's queues —,
    read a queue not its own, bind its own queue where it would read what others are sent, or
    publish tasks, broadcasts or messages to another's queue. What it may do (its own queues,
    reports, a passive look at the shared exchanges) it can."""
    node = own_rabbitmq()
    admin_url = with_vhost(node.url, ACCOUNT_VHOST)
    on = OnNode(stack, node, CELERY_BROKER_URL=admin_url)
    host, other, mq = stack.agent_name("host-1"), stack.agent_name("host-2"), stack.management_queue
    reports = f"{mq}.reports"
    own_url = agent_account(on, node, host, "agent-1")
    exchanges, queues = shared_entities(mq, other)
    with kombu.Connection(admin_url) as admin:
        channel = admin.channel()
        for exchange in exchanges.values():
            exchange(channel).declare()
        for queue in queues.values():
            queue(channel).declare()
            channel.basic_publish(channel.prepare_message(b'{"kept": true}'), exchange="", routing_key=queue.name)

    with kombu.Connection(own_url) as connection:
        # What it may do: its own queues (task queue and exchange, claim replies, remote-control
        # queue bound to the broadcasts), a report, and a passive look at what is shared.
        allowed = {
            "declare its queue": lambda c: kombu.Queue(host, kombu.Exchange(host, "direct"), routing_key=host)(c).declare(),
            "declare its reply queue": lambda c: c.queue_declare(f"{host}.replies.box.7", durable=False, auto_delete=True),
            "declare its remote-control queue": lambda c: kombu.Queue(
                f"{host}@box.celery.pidbox", kombu.Exchange("celery.pidbox", "fanout", durable=False, passive=True),
                durable=False, auto_delete=True)(c).declare(),
            "publish a report": publish(f"{mq}.reporting", reports),
            "publish a remote-control reply": publish("reply.celery.pidbox", "1f2e3d4c"),
            "publish an event": publish("celeryev", "worker.heartbeat"),
            **{f"passive declare of {name}": (lambda c, e=exchange: e(c).declare(passive=True))
               for name, exchange in exchanges.items()},
        }
        done = {what: attempt(connection, fn) for what, fn in allowed.items()}
        assert {what: outcome for what, outcome in done.items() if outcome != "done"} == {}

        refused = {}
        for name, exchange in [*exchanges.items(), ("amq.direct", kombu.Exchange("amq.direct", "direct")),
                               ("the default exchange", kombu.Exchange("", "direct"))]:
            refused[f"delete exchange {name}"] = lambda c, name=exchange.name: c.exchange_delete(name)
            refused[f"declare exchange {name} as it is"] = (
                lambda c, e=exchange: c.exchange_declare(e.name, e.type, durable=e.durable, auto_delete=False))
            refused[f"declare exchange {name} otherwise"] = (
                lambda c, e=exchange: c.exchange_declare(e.name, "headers", durable=not e.durable, auto_delete=True))
        refused["declare exchange amq.switchyard"] = lambda c: c.exchange_declare("amq.switchyard", "fanout")
        for name, queue in queues.items():
            refused[f"delete queue {name}"] = lambda c, name=name: c.queue_delete(name)
            refused[f"declare queue {name} as it is"] = (
                lambda c, q=queue: c.queue_declare(q.name, durable=q.durable, auto_delete=q.auto_delete))
            refused[f"declare queue {name} otherwise"] = (
                lambda c, q=queue: c.queue_declare(q.name, durable=not q.durable, arguments={"x-max-length": 1}))
            refused[f"purge queue {name}"] = lambda c, name=name: c.queue_purge(name)
            refused[f"get from queue {name}"] = lambda c, name=name: c.basic_get(name)
            refused[f"consume queue {name}"] = lambda c, name=name: c.basic_consume(name, callback=lambda m: None)
            refused[f"bind queue {name} to the broadcasts"] = lambda c, name=name: c.queue_bind(name, "celery.pidbox")
        refused[f"unbind the reports queue from {mq}.reporting"] = (
            lambda c: c.queue_unbind(reports, f"{mq}.reporting", routing_key=reports))
        # Its own queue bound where it would be sent copies of what others are.
        for name, key in [(f"{mq}.reporting", reports), ("celeryev", "#"), ("reply.celery.pidbox", "1f2e3d4c"),
                          (mq, mq), (other, other), ("amq.direct", mq)]:
            refused[f"bind its queue to {name}"] = lambda c, name=name, key=key: c.queue_bind(host, name, routing_key=key)
        refused[f"bind its exchange to {mq}.reporting"] = (
            lambda c: c.exchange_bind(destination=host, source=f"{mq}.reporting", routing_key=reports))
        for what, (exchange, key) in {
            "a task to the management queue": (mq, mq),
            "a task to the management queue through the default exchange": ("", mq),
            "a task to another agent's queue": (other, other),
            "a task to another agent's queue through the default exchange": ("", other),
            "an answer to another agent's claim": ("", f"{other}.replies.box.42"),
            "a broadcast (a kill, a cancel)": ("celery.pidbox", ""),
            "a report straight into the reports queue": ("", reports),
            "to amq.direct": ("amq.direct", mq),
        }.items():
            refused[f"publish {what}"] = publish(exchange, key)
        outcomes = {what: attempt(connection, fn) for what, fn in refused.items()}
    assert {what: outcome for what, outcome in outcomes.items() if outcome != "refused"} == {}

    # Everything shared is still there as it was declared, with what it held.
    with kombu.Connection(admin_url) as admin:
        for name, exchange in exchanges.items():
            as_declared = attempt(admin, lambda c, e=exchange: c.exchange_declare(e.name, e.type, durable=e.durable,
                                                                                  auto_delete=False))
            assert as_declared == "done", f"{name}: {as_declared}"
        held = {name: admin.channel().queue_declare(name, passive=True).message_count for name in queues}
    # What each held, and the report and the reply the account published.
    assert held == {**{name: 1 for name in queues}, reports: 2, "1f2e3d4c.reply.celery.pidbox": 2}


@pytest.mark.django_db(transaction=True)
def test_an_agent_with_an_account_of_its_own_waits_for_the_managers_then_works(own_rabbitmq, stack):
    """An agent whose RabbitMQ account has only the permissions ``rabbitmq_agent_account`` prints
    (and no database) declares nothing shared: started before any manager, in a new vhost, it
    waits for the managers to declare what it uses. Then it registers, heart-beats, runs
    operations and their retries, answers remote control, sends its task events, and hears a
    cancel and a kill; the broker refused it nothing."""
    node = own_rabbitmq()
    admin_url = with_vhost(node.url, ACCOUNT_VHOST)
    on = OnNode(stack, node, CELERY_BROKER_URL=admin_url)
    host = stack.agent_name("host-1")
    own_url = agent_account(on, node, host, "agent-1")
    agent = stack.manage(host, "run_agent", host, "--concurrency", "2", "--loglevel", "INFO",
                         env={**on.env, "CELERY_BROKER_URL": own_url, "DATABASE_URL": NO_DATABASE_URL})
    stack.wait_for(lambda: "waiting for a manager to declare" in agent.log_text(), 60,
                   "the agent to wait for the managers", agent.log_tail)
    assert agent.alive() and not Agent.objects.filter(name=host).exists()

    on.manager()
    registered = stack.wait_for_agent(host)
    beat = Agent.objects.get(name=host).last_heartbeat
    stack.wait_for(lambda: Agent.objects.get(name=host).last_heartbeat > beat, 30, "a later heartbeat")
    with kombu.Connection(admin_url) as admin:  # a copy of every event from now on, as Flower gets them
        events = kombu.Queue("events-copy", kombu.Exchange("celeryev", "topic", passive=True), routing_key="#",
                             durable=False)
        events(admin.channel()).declare()

    done = on.start("it_retries", f"agent={host}", failure_mode="continue_while_possible")
    finish(stack, done, "failed")
    assert operations(done)["flaky"].state == "succeeded" and ran(stack, "flaky") == 3, "outcomes and retries reported"
    cancelled, killed = cancel_and_kill(stack, on, host)

    answered = on.command("ping", "shell", "-c", "from switchyard.celery import app; print(app.control.ping(timeout=3))")
    assert f"'{host}@" in answered, "it answers remote control"
    with kombu.Connection(admin_url) as admin:
        channel = admin.channel()
        seen = set()
        while (message := channel.basic_get("events-copy", no_ack=True)) is not None:
            body = json.loads(message.body)
            for event in body if isinstance(body, list) else [body]:  # a worker sends task events in batches
                if str(event.get("hostname", "")).startswith(f"{host}@"):
                    seen.add(event.get("type"))
    assert {"task-received", "task-started", "task-succeeded"} <= seen, seen
    assert Agent.objects.get(name=host).started_at == registered.started_at, "one run of it throughout"
    assert agent.alive()
    assert "ACCESS_REFUSED" not in agent.log_text() and "NOT_FOUND" not in agent.log_text(), agent.log_tail()
    for execution in (done, cancelled, killed):
        assert_operation_events_consistent(execution)
