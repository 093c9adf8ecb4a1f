"""Every agent's key (``manage.py agent_key``, ``run_agent --key-file``, ``AGENT_MASTER_KEY``):
what proves that a report comes from its agent, and a message from the managers."""

import io
import os

import pytest
from django.core.management import CommandError, call_command

from agents.management.commands import run_agent
from workflows_app import conf, signing
from workflows_app.wire import keys

pytestmark = pytest.mark.django_db


def agent_key(*args) -> str:
    out = io.StringIO()
    call_command("agent_key", *args, stdout=out)
    return out.getvalue().strip()


def test_the_printed_key_is_the_one_the_managers_check_and_differs_per_agent():
    key = agent_key("host-1")
    assert keys.is_key(key) and key == signing.agent_key("host-1") != agent_key("host-2")
    assert agent_key("host-1") == key, "the same every time: nothing to store"


def test_rotate_gives_one_agent_a_new_key_and_leaves_the_others_theirs():
    old, other = agent_key("host-1"), agent_key("host-2")
    new = agent_key("host-1", "--rotate")
    assert keys.is_key(new) and new != old and agent_key("host-1") == new
    assert agent_key("host-2") == other
    report = {"kind": "heartbeat", "agent": "host-1", "incarnation": "x"}
    assert not keys.proven(keys.prove(old, keys.Purpose.REPORT, report), signing.agent_key("host-1"),
                           keys.Purpose.REPORT, report), "the old key proves nothing any more"


def test_the_master_key_setting_changes_every_agents_key(settings):
    from_secret_key = agent_key("host-1"), agent_key("host-2")
    settings.WORKFLOWS = {"AGENT_MASTER_KEY": "m" * 32}
    one = agent_key("host-1"), agent_key("host-2")
    settings.WORKFLOWS = {"AGENT_MASTER_KEY": "n" * 32}
    other = agent_key("host-1"), agent_key("host-2")
    assert len({*from_secret_key, *one, *other}) == 6


@pytest.mark.parametrize("value", ["short", "x" * 31, "spaces " * 8, 42, b"b" * 40])
def test_a_master_key_that_cannot_be_one_is_refused_by_the_checks(value):
    assert [problem for problem in conf.bad_values({"AGENT_MASTER_KEY": value}) if "AGENT_MASTER_KEY" in problem]


def test_a_name_no_agent_can_have_has_no_key():
    with pytest.raises(CommandError, match="invalid agent name"):
        agent_key("with space")


@pytest.fixture
def no_key(monkeypatch):
    monkeypatch.delenv(keys.KEY_ENV, raising=False)
    yield
    os.environ.pop(keys.KEY_ENV, None)


def test_run_agent_takes_its_key_from_the_key_file(tmp_path, no_key):
    key = signing.agent_key("host-1")
    (tmp_path / "key").write_text(key + "\n")
    run_agent.use_key(tmp_path / "key")
    assert os.environ[keys.KEY_ENV] == key and keys.own_key("host-1") == key


@pytest.mark.parametrize("content, error", [
    (None, "--key-file: cannot read"), ("not a key", "--key-file .*: not an agent key"), ("A" * 64, "not an agent key"),
])
def test_a_key_file_that_holds_no_key_is_a_one_line_error(tmp_path, no_key, content, error):
    path = tmp_path / "key"
    if content is not None:
        path.write_text(content)
    with pytest.raises(CommandError, match=error):
        run_agent.use_key(path)
    assert keys.KEY_ENV not in os.environ, "and the agent does not start with it"


def test_a_key_in_the_environment_that_is_no_key_is_a_one_line_error(monkeypatch):
    monkeypatch.setenv(keys.KEY_ENV, "1234")
    with pytest.raises(CommandError, match=f"{keys.KEY_ENV}: not an agent key"):
        run_agent.use_key(None)


def test_an_agent_given_no_key_derives_its_own_from_the_master_key(no_key):
    run_agent.use_key(None)
    assert keys.own_key("host-1") == signing.agent_key("host-1")


def test_a_starting_manager_counts_only_the_answers_their_agents_proved_for_its_question(monkeypatch):
    """What runs where decides which started attempts are lost (and run again): a forged answer
    saying an agent runs nothing would run its attempts twice."""

    def answer(agent, nonce, key_of=None):
        said = {"agent": agent, "incarnation": f"{agent}-run", "running": []}
        return {f"{agent}@box": {"ok": {**said, "proof": keys.prove(signing.agent_key(key_of or agent),
                                                                     keys.Purpose.RUNNING, {**said, "nonce": nonce})}}}

    class Control:
        def broadcast(self, command, arguments, reply, timeout):
            nonce = arguments["nonce"]
            return [answer("honest", nonce), answer("forged", nonce, key_of="honest"), answer("replayed", "an old question"),
                    {"unproved@box": {"ok": {"agent": "unproved", "incarnation": "x", "running": []}}}]

    from workflows_app import broker

    monkeypatch.setattr(broker, "_control", Control)
    assert broker.ask_running(1) == [{"agent": "honest", "incarnation": "honest-run", "running": []}]
