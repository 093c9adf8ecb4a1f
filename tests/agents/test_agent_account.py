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
    assert read.match("host-1") and read.match("host-1.replies.box.42") and read.match("host-1@box.celery.pidbox")
    assert not read.match("host-2") and not read.match("management.reports") and not read.match("management")
    assert write.match("management.reporting") and not write.match("management") and not write.match("celery.pidbox")
    assert configure.match("management.reporting") and not configure.match("management.reports")


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
