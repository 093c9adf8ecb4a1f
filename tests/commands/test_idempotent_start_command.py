"""``manage.py start_execution --idempotency-key KEY``: run again with the same key and arguments, the
command starts nothing and prints what the first run printed, saying on stderr that it is the
execution started earlier; with other arguments it fails with one line. As a script sees it: a
child process against the test's database (a transactional test, so that it sees its rows)."""

import io
import json
import subprocess
import sys
import uuid

import pytest
from django.core.management import CommandError, call_command
from kombu import Exchange, Queue

from switchyard.celery import app

from tests.integration.harness import ROOT, child_environment
from workflows_app.models import Execution, IdempotencyKey

pytestmark = pytest.mark.django_db


def command(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_the_same_command_with_the_same_key_prints_the_first_execution_and_starts_nothing(outbox):
    out, err = command("start_execution", "demo", "--param", "n=2", "--idempotency-key", "deploy-42")
    first = uuid.UUID(out.strip())
    assert err == ""
    again, said = command("start_execution", "demo", "--param", "n=2", "--idempotency-key", "deploy-42")
    assert again == out, "stdout is what a start prints"
    assert said.strip() == (f"execution {first} was started earlier with the idempotency key 'deploy-42': nothing "
                            "was started now")
    assert list(Execution.objects.values_list("pk", flat=True)) == [first]


def test_with_json_stdout_holds_the_execution_only(outbox):
    first = json.loads(command("start_execution", "demo", "--idempotency-key", "k", "--json")[0])
    out, err = command("start_execution", "demo", "--idempotency-key", "k", "--json")
    assert json.loads(out)["id"] == first["id"] and "started earlier" in err


def test_other_arguments_with_the_same_key_are_a_one_line_error(outbox):
    first = command("start_execution", "demo", "--param", "n=2", "--idempotency-key", "deploy-42")[0].strip()
    with pytest.raises(CommandError) as refused:
        command("start_execution", "demo", "--param", "n=3", "--idempotency-key", "deploy-42")
    message = str(refused.value)
    assert "\n" not in message and "'deploy-42'" in message and first in message
    assert Execution.objects.count() == 1


def test_a_key_that_cannot_be_one_is_a_one_line_error(outbox):
    with pytest.raises(CommandError, match="idempotency_key: at most 255 characters"):
        command("start_execution", "demo", "--idempotency-key", "k" * 256)
    assert not Execution.objects.exists()


def test_without_a_key_the_same_command_starts_again(outbox):
    command("start_execution", "demo")
    command("start_execution", "demo")
    assert Execution.objects.count() == 2 and not IdempotencyKey.objects.exists()


def test_a_rerun_with_a_key_is_started_once(outbox, make_execution, make_operation):
    original = make_execution(status="failed", workflow_id="demo")
    make_operation(execution=original, name="step-a")
    args = ("start_execution", "--rerun-of", str(original.pk), "--from-step", "step-a", "--idempotency-key", "r")
    out, _ = command(*args)
    again, said = command(*args)
    assert again == out and "started earlier" in said
    assert Execution.objects.filter(rerun_of=original).count() == 1


@pytest.fixture
def child_env(transactional_db, tmp_path):
    """``manage.py`` on the test's database and broker, with the test workflows; what it starts goes to a management queue
    of its own, which nothing consumes and which is deleted after (as ``tests/commands/test_commands.py``)."""
    queue = f"mgmt-idem-{uuid.uuid4().hex[:8]}"
    yield child_environment(workflows={"MANAGEMENT_QUEUE": queue}, markers_dir=tmp_path)
    with app.connection_for_write() as broker:
        declared = Queue(queue, Exchange(queue, "direct"), routing_key=queue, channel=broker.default_channel)
        declared.declare()
        declared.delete()


def test_as_a_script_sees_it(child_env):
    """Run twice as a child process: the same id on stdout, exit 0, the note on stderr; then a
    conflict: exit 1 and one line on stderr, no traceback."""
    def manage(*args):
        return subprocess.run([sys.executable, "manage.py", "start_execution", *args], cwd=ROOT, env=child_env,
                              capture_output=True, text=True, timeout=120)

    first = manage("it_single", "--param", "agent=a1", "--idempotency-key", "cli-1")
    assert first.returncode == 0, first.stderr
    again = manage("it_single", "--param", "agent=a1", "--idempotency-key", "cli-1")
    assert (again.returncode, again.stdout) == (0, first.stdout)
    assert "was started earlier with the idempotency key 'cli-1'" in again.stderr
    conflict = manage("it_single", "--param", "agent=a2", "--idempotency-key", "cli-1")
    assert conflict.returncode == 1 and "Traceback" not in conflict.stderr
    assert conflict.stderr.strip().count("\n") == 0 and "already used for another request" in conflict.stderr
    assert list(Execution.objects.values_list("pk", flat=True)) == [uuid.UUID(first.stdout.strip())]
