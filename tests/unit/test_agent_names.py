"""The one check of an agent's name (``values.check_agent_name``): a name is a queue's on the
broker, which must not be one the broker, Celery or the managers keep for themselves. Every door
that takes a name uses it: steps and canvases (tests/engine/test_agent_name_doors.py), a task's
``queue_name`` (tests/engine/test_django_tasks.py), the API (tests/api/test_start.py), the commands
(tests/commands/test_agent_name_commands.py)."""

import re

import pytest
from django.test import override_settings

from workflows_app import values
from workflows_app.errors import ValueRefused

#: Names the docs, the tests and the bench use: they stay good.
GOOD = ["host-1", "a1", "local", "storage-1", "warehouse", "mgmt-1a2b3c4d", "agent-7", "A_b.c-d", "9lives",
        "host-1.eu", "x" * values.MAX_AGENT_NAME, "celer", "my-celery", "amq", "amqp-host", "replies",
        "host.replies", "pidbox", "unacked-orders", "managements", "management-2"]

#: (name, what the refusal says)
BAD = [
    ("", "may not be empty"),
    ("x" * (values.MAX_AGENT_NAME + 1), "more than the 100"),
    ("two words", "ASCII letters, digits"),
    ("a@b", "ASCII letters, digits"),
    ("a/b", "ASCII letters, digits"),
    ("..", "starts with a letter or a digit"),
    ("-x", "starts with a letter or a digit"),
    (".hidden", "starts with a letter or a digit"),
    ("_kombu.binding.x", "starts with a letter or a digit"),
    ("hôte", "ASCII letters, digits"),
    ("tab\tname", "ASCII letters, digits"),
    ("line\nbreak", "ASCII letters, digits"),
    ("nul\x00", "ASCII letters, digits"),
    ("surrogate\udcff", "ASCII letters, digits"),
    ("a*", "ASCII letters, digits"),
    ("celery", "Celery's own"),
    ("celery.pidbox", "Celery's own"),
    ("celeryev", "Celery's own"),
    ("celeryev.3c1f", "Celery's own"),
    ("celery-task-meta-1", "Celery's own"),
    ("reply.celery.pidbox", "remote control"),
    ("host-1@box.celery.pidbox", "ASCII letters, digits"),
    ("box.pidbox", "remote control"),
    ("amq.gen-JzTY20BRgKO", "RabbitMQ"),
    ("amq.direct", "RabbitMQ"),
    ("management", "the managers' queue"),
    ("management.reports", "are the managers'"),
    ("management.reporting", "are the managers'"),
    ("host-1.replies.box.42", "reply queues"),
    ("unacked", "Redis transport"),
    ("unacked_index", "Redis transport"),
    ("unacked_mutex", "Redis transport"),
]


@pytest.mark.parametrize("name", GOOD)
def test_the_names_agents_have_are_taken(name):
    assert values.agent_name_problem(name) is None
    assert values.check_agent_name(name) == name


@pytest.mark.parametrize("name, why", BAD)
def test_a_name_the_broker_celery_or_the_managers_keep_or_no_queue_can_have_is_refused_on_one_line(name, why):
    assert why in values.agent_name_problem(name)
    with pytest.raises(ValueRefused, match="invalid agent name") as refused:
        values.check_agent_name(name, "step 'charge'")
    message = str(refused.value)
    assert message.startswith("step 'charge': invalid agent name ") and why in message
    assert "\n" not in message and "\x00" not in message and message.encode("utf-8")
    assert not refused.value.too_large  # the API answers 400 invalid_parameters


@pytest.mark.parametrize("name", [None, 7, ["host-1"], b"host-1"])
def test_a_name_is_a_string(name):
    assert "an agent name is a string" in values.agent_name_problem(name)
    with pytest.raises(ValueRefused, match="a string"):
        values.check_agent_name(name)


def test_the_managers_names_follow_the_management_queue():
    with override_settings(WORKFLOWS={"MANAGEMENT_QUEUE": "shop-mgmt"}):
        for name in ("shop-mgmt", "shop-mgmt.reports", "shop-mgmt.reporting", "shop-mgmt.anything"):
            assert "managers" in values.agent_name_problem(name)
        assert values.agent_name_problem("management") is None
        assert values.agent_name_problem("shop-mgmt-2") is None


@pytest.mark.parametrize("name", [*GOOD[:8], "x" * values.MAX_AGENT_NAME])
def test_a_good_name_is_a_queue_a_permission_and_a_reply_queue(name):
    # A RabbitMQ permission is a regular expression over the name, escaped (agents.accounts).
    assert re.fullmatch(re.escape(name), name)
    # Its reply queues (wire.reply_queue) fit the 200 characters a claim's reply_to may have,
    # with a host name of 64 characters and the largest pid.
    assert len(f"{name}.replies.{'h' * 64}.{4194304}") <= 200
    # RabbitMQ's queue names are at most 255 bytes.
    assert len(f"{name}@{'h' * 64}.celery.pidbox".encode()) <= 255
