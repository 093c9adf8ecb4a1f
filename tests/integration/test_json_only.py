"""JSON only on the wire, whatever the host project's Celery settings say.

A host project whose settings accept pickle (``CELERY_ACCEPT_CONTENT = ["pickle", "json"]``, as
Celery's defaults did before 4.0) runs Switchyard's manager and agent. Anyone who may publish to
the broker then sends the agent pickled messages whose unpickling would run code — here, create a
file — to its queue and as a remote-control command: the agent refuses both without reading them,
says so in its log, and goes on working. Switchyard's own messages, sent by that host's processes
(a start, a kill), are JSON, and reach the JSON-only workers.
"""

import os
import re
import uuid

import kombu
import pytest
from celery import current_app

from tests.integration.test_engine import gone
from workflows_app import broker, services
from workflows_app.models import Operation

pytestmark = pytest.mark.integration

#: What kombu's ``ContentDisallowed`` says, and Celery logs, when it refuses a message's body.
REFUSED = "Refusing to deserialize untrusted content of type pickle"
#: The line Celery logs for each message refused: a task message, or a remote-control command.
REFUSAL = re.compile(rf"^\[.*(Received invalid task message|Can't decode message body): .*{REFUSED}", re.M)

HOST_SETTINGS = '''\
"""A host project's settings that trust pickle."""
from switchyard.settings import *  # noqa: F403

CELERY_ACCEPT_CONTENT = ["pickle", "json"]
CELERY_TASK_SERIALIZER = "pickle"
CELERY_RESULT_SERIALIZER = "pickle"
CELERY_EVENT_SERIALIZER = "pickle"
'''


class Trap:
    """Unpickled, it calls ``open(path, "x")``: the file appears, as a shell command in its place
    would have run."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "x")


def host_environment(tmp_path) -> dict:
    """The environment of the pickle-trusting host's processes."""
    site = tmp_path / "host"
    site.mkdir()
    (site / "pickle_host_settings.py").write_text(HOST_SETTINGS)
    return {
        "DJANGO_SETTINGS_MODULE": "pickle_host_settings",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
        # Celery refuses to start a worker as root that accepts pickle; a host that runs its workers
        # as root says this. (Switchyard's workers accept JSON only, so they start either way.)
        "C_FORCE_ROOT": "1",
    }


@pytest.mark.django_db(transaction=True)
def test_a_host_that_accepts_pickle_still_gets_workers_that_take_json_only(stack, tmp_path):
    host = host_environment(tmp_path)
    manager = stack.manage("manager", "run_manager", "--loglevel", "INFO", env=host)
    agent = stack.agent_name("picky")
    worker = stack.manage(agent, "run_agent", agent, "--concurrency", "1", "--loglevel", "INFO", env=host)
    stack.wait_for_agent(agent)
    app = current_app._get_current_object()

    def refusals(process=worker) -> int:
        return len(REFUSAL.findall(process.log_text()))

    # A pickled message of the runner task, to the agent's queue.
    on_queue = tmp_path / "unpickled-from-the-queue"
    message = app.amqp.as_task_v2(str(uuid.uuid4()), broker.RUNNER_TASK, args=[Trap(on_queue), 1])
    with kombu.Connection(stack.env["CELERY_BROKER_URL"]) as connection:
        connection.Producer().publish(message.body, exchange="", routing_key=agent, serializer="pickle",
                                      headers=message.headers, **message.properties)
    stack.wait_for(lambda: on_queue.exists() or refusals() == 1, 30, "the agent to refuse the pickled task message",
                   lambda: worker.log_tail(40))
    assert not on_queue.exists(), "the agent unpickled a message from its queue"

    # A pickled remote-control command, broadcast to every worker (the manager too) as Switchyard's kill is.
    by_broadcast = tmp_path / "unpickled-from-a-broadcast"
    pidbox = app.control.mailbox.exchange
    with kombu.Connection(stack.env["CELERY_BROKER_URL"]) as connection:
        connection.Producer().publish({"method": broker.RUNNING_COMMAND, "arguments": {"trap": Trap(by_broadcast)},
                                       "destination": None}, exchange=pidbox, routing_key="", serializer="pickle",
                                      declare=[pidbox])
    stack.wait_for(lambda: by_broadcast.exists() or (refusals() == 2 and refusals(manager) == 1), 30,
                   "the agent and the manager to refuse the pickled command",
                   lambda: worker.log_tail(40) + manager.log_tail(40))
    assert not by_broadcast.exists(), "a worker unpickled a remote-control command"

    # The agent runs on, and what the host's own processes send is JSON: an execution started
    # from the host's command line runs its operation on the agent...
    start = stack.manage("start", "start_execution", "it_single", "--param", f"agent={agent}", "--param", "tag=after",
                         "--param", "seconds=0", "--wait", "--timeout", "60", env=host, expect_exit=True)
    assert start.wait(timeout=90) == 0, start.log_tail(60)
    assert [run["agent"] for run in stack.invocations("after")] == [agent]

    # ...and a kill from the host's command line reaches it (a remote-control broadcast).
    execution = services.start("it_single", {"agent": agent, "tag": "long", "seconds": 120.0})
    run = stack.wait_for(lambda: stack.invocations("long"), 30, "the operation to start")[0]
    kill = stack.manage("kill", "cancel_execution", str(execution.pk), "--kill", env=host, expect_exit=True)
    assert kill.wait(timeout=60) == 0, kill.log_tail(60)
    stack.wait_for(lambda: gone(run["pid"]), 20, f"the killed operation's process {run['pid']} to be gone",
                   lambda: worker.log_tail(40))
    assert Operation.objects.get(execution_id=execution.pk, name="long").state == "cancelled"

    assert (refusals(), refusals(manager)) == (2, 1), "only the pickled messages were refused"
    assert worker.alive() and manager.alive()
