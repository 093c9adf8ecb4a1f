"""``manage.py rabbitmq_agent_account NAME``: the ``rabbitmqctl`` commands of an agent's own
RabbitMQ account (``agents.accounts``). What RabbitMQ then allows and refuses is
``tests/integration/test_rabbitmq.py``'s; this is the command's own door."""

import re
import shlex
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings



def account(*args) -> list[list[str]]:
    out = StringIO()
    call_command("rabbitmq_agent_account", *args, stdout=out)
    return [shlex.split(line) for line in out.getvalue().splitlines()]


def test_it_prints_the_account_and_its_permissions_on_the_vhost_for_the_user():
    add, grant = account("host-1", "--user", "agent-1", "--vhost", "/ops")
    assert add[:3] == ["rabbitmqctl", "add_user", "agent-1"]
    assert grant[:5] == ["rabbitmqctl", "set_permissions", "-p", "/ops", "agent-1"]
    configure, write, read = (re.compile(pattern) for pattern in grant[5:])
    own = ["host-1", "host-1.replies.box.42", "host-1@box.celery.pidbox"]
    shared = ["management.reporting", "celery.pidbox", "reply.celery.pidbox", "celeryev"]
    others = ["management", "management.reports", "host-2", "host-2.replies.box.42", "host-2@box.celery.pidbox",
              "host-10", "1f2e3d4c.reply.celery.pidbox", "", "amq.default", "amq.direct"]
    # Its own it configures (declares, deletes), writes and reads; nothing shared it configures.
    assert [name for name in own + shared + others if configure.match(name)] == own
    # It publishes to its own, its reports, its answers to remote control and its events.
    assert [name for name in own + shared + others if write.match(name)] == [
        *own, "management.reporting", "reply.celery.pidbox", "celeryev"]
    # It reads its own queues, and binds its remote-control queue to the broadcasts.
    assert [name for name in own + shared + others if read.match(name)] == [*own, "celery.pidbox"]


def test_the_user_defaults_to_the_agents_name_and_the_vhost_to_the_default_one():
    add, grant = account("host-1")
    assert add[2] == "host-1" and grant[3:5] == ["/", "host-1"]


@override_settings(WORKFLOWS={"MANAGEMENT_QUEUE": "ops-mgmt"})
def test_the_reports_exchange_follows_the_management_queue():
    _, grant = account("host-1")
    assert re.compile(grant[6]).match("ops-mgmt.reporting") and not re.compile(grant[6]).match("management.reporting")


@pytest.mark.parametrize("name", ["", "two words", "a@b", "nul\x00", "surrogate\udcff", "tab\tname", "x" * 201])
def test_a_name_no_agent_can_have_is_a_one_line_error(name):
    with pytest.raises(CommandError, match="invalid agent name") as refused:
        account(name)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("name", ["management", "management.reports", "management.reporting", "celery.pidbox",
                                  "reply.celery.pidbox", "celeryev", "amq.gen-1", "host-1.replies.box"])
def test_no_account_for_a_name_that_would_configure_what_is_shared_or_another_agents(name):
    """The account configures what is named after its agent: never the management queue, the
    reports queue, a shared exchange, RabbitMQ's own, or another agent's reply queues."""
    with pytest.raises(CommandError, match="invalid agent name") as refused:
        account(name)
    assert "\n" not in str(refused.value)
