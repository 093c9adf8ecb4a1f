"""The commands that take an agent's name refuse one no agent can have (``values.check_agent_name``)
with a one-line error, before they start or print anything: ``run_agent NAME`` (its
``check_name``, which ``rabbitmq_agent_account`` and ``agent_key`` share).

The names refused before (unprintable, spaces, ``@``) are tested with each command; these are the
ones the one check adds: those the broker, Celery and the managers keep, and what is no queue's
name on every broker."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

#: Names the one check refuses that ``run_agent`` took before.
REFUSED_NOW = ["x" * 101, ".x", "_kombu.binding.x", "hôte", "celery", "celery.pidbox", "reply.celery.pidbox",
               "celeryev", "amq.gen-1", "management", "management.reports", "management.reporting",
               "host-1.replies.box.42", "unacked"]

def ids(name):
    return name if len(name) <= 30 else f"{name[:10]}...{len(name)}"


@pytest.mark.parametrize("name", REFUSED_NOW, ids=ids)
def test_run_agent_refuses_a_name_no_agent_can_have_before_it_starts_anything(name):
    from agents.management.commands.run_agent import check_name  # what handle() calls first

    with pytest.raises(CommandError, match="invalid agent name") as refused:
        check_name(name)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("name", REFUSED_NOW, ids=ids)
def test_rabbitmq_agent_account_prints_nothing_for_a_name_no_agent_can_have(name):
    out = StringIO()
    with pytest.raises(CommandError, match="invalid agent name") as refused:
        call_command("rabbitmq_agent_account", name, stdout=out)
    assert "\n" not in str(refused.value) and out.getvalue() == ""
