"""``export_execution`` and ``replay_check``: an execution's history written as JSON, and today's
workflow code checked against such files — one line per file, a non-zero exit unless every one
replays, every bad input one line."""

import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone

from workflows_app import services
from workflows_app.engine import live, reports
from workflows_app.models import Execution, Operation
from workflows_app.states import OperationState
from tests.engine.passes import run_pass
from tests.replay_workflows import CODE_VERSION_ENV

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("outbox")]


@pytest.fixture(autouse=True)
def with_the_replay_workflows():
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=["tests.replay_workflows"]):
        yield


def command(*args) -> str:
    """``call_command(*args)``: what it printed on stdout."""
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def refused(*args) -> tuple[str, str]:
    """The CommandError of ``call_command(*args)`` (one line), and what it printed before."""
    out = io.StringIO()
    with pytest.raises(CommandError) as error:
        call_command(*args, stdout=out, stderr=io.StringIO())
    said = str(error.value)
    assert "\n" not in said
    return said, out.getvalue()


@pytest.fixture
def waiting() -> Execution:
    """An rc_deploy execution (version 1): ``a`` succeeded, it waits for the event ``go``."""
    execution = run_pass(services.start("rc_deploy", {}))
    operation = Operation.objects.get(execution_id=execution.pk, name="a")
    Operation.objects.filter(pk=operation.pk).update(state=OperationState.STARTED, started_at=timezone.now())
    operation.refresh_from_db()
    assert reports.record_success(operation, operation.attempt, "a")
    live.clear()
    return run_pass(execution)


# --- export_execution ---------------------------------------------------------------------------

def test_export_writes_the_history_on_stdout(waiting):
    document = json.loads(command("export_execution", str(waiting.pk)))
    assert document["execution"]["id"] == str(waiting.pk)
    assert [step["name"] for step in document["steps"]] == ["a"]
    assert [wait["key"] for wait in document["waits"]] == ["event:go#1"]


def test_export_takes_the_start_of_an_id_as_the_other_commands_do(waiting):
    document = json.loads(command("export_execution", str(waiting.pk)[:8]))
    assert document["execution"]["id"] == str(waiting.pk)


def test_export_to_a_file_says_where(waiting, tmp_path):
    path = tmp_path / "history.json"
    assert command("export_execution", str(waiting.pk), "--output", str(path)) == f"{waiting.pk} {path}\n"
    assert json.loads(path.read_text())["execution"]["workflow_id"] == "rc_deploy"


@pytest.mark.parametrize("argument, error", [
    ("770b968c-1f2a-4c47-9a43-2f0c1c6f1a11", "no execution '770b968c-1f2a-4c47-9a43-2f0c1c6f1a11'"),
    ("770g", "no execution '770g': an execution id is hex digits, with or without its dashes"),
    ("77", "no execution '77': give at least 4 digits of its id"),
])
def test_export_of_no_execution_is_one_line(argument, error):
    assert refused("export_execution", argument)[0] == error


def test_export_to_a_file_that_cannot_be_written_is_one_line(waiting, tmp_path):
    said, _ = refused("export_execution", str(waiting.pk), "--output", str(tmp_path / "no" / "such" / "dir.json"))
    assert said == f"cannot write {str(tmp_path / 'no' / 'such' / 'dir.json')!r}: No such file or directory"


# --- replay_check --------------------------------------------------------------------------------

@pytest.fixture
def exported(waiting, tmp_path):
    path = tmp_path / "waiting.json"
    command("export_execution", str(waiting.pk), "--output", str(path))
    return path


def test_replay_check_says_ok_for_each_history_that_replays(exported, monkeypatch):
    monkeypatch.setenv(CODE_VERSION_ENV, "2")  # the change is behind ctx.patched
    assert command("replay_check", str(exported), str(exported)) == f"{exported}: ok\n{exported}: ok\n"


def test_replay_check_fails_naming_the_step_of_a_history_that_does_not_replay(exported, tmp_path, monkeypatch):
    monkeypatch.setenv(CODE_VERSION_ENV, "3")  # step c inserted before the event, unguarded
    said, out = refused("replay_check", str(exported))
    assert said == "1 of 1 histories do not replay with today's code"
    assert out == (f"{exported}: non-deterministic workflow: this replay asked for step 'c', which the history does "
                   "not hold, before reaching the history's wait 'event:go#1': the code takes another path than the "
                   "one this execution took; guard the change with ctx.patched\n")


def test_replay_check_reads_every_file_and_says_what_it_could_not_read(exported, tmp_path):
    not_json, not_history, missing = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "none.json"
    not_json.write_text("{oops")
    not_history.write_text(json.dumps({"format": "something else"}))
    said, out = refused("replay_check", str(not_json), str(exported), str(not_history), str(missing))
    assert said == "3 of 4 histories do not replay with today's code"
    lines = out.splitlines()
    assert lines[0].startswith(f"{not_json}: cannot read it: not JSON (Expecting property name")
    assert lines[1:] == [
        f"{exported}: ok",
        f"{not_history}: cannot read it: not an execution history: its \"format\" is not 'switchyard.history'",
        f"{missing}: cannot read it: No such file or directory",
    ]


def test_replay_check_needs_a_file():
    said, _ = refused("replay_check")
    assert said == "Error: the following arguments are required: FILE"
