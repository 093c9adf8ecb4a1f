"""``cancel_executions``, ``resume_executions``, ``pause_executions``: a bulk action with the filters
of ``list_executions`` (shared: ``workflows_app.bulk.selection``), ``--all``, ``--dry-run`` and
``--json`` (the document ``POST /api/v1/executions/bulk`` answers). In process through
``call_command``; what a script sees (stdout, one line on stderr, the exit status) through
``python manage.py`` against the test's database and broker."""

import io
import json
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from tests.api.conftest import FORCER, make_user
from tests.integration.harness import ROOT, child_environment
from workflows_app.models import Execution
from workflows_app.states import ExecutionStatus, OperationState


def command(*args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def status_of(execution) -> str:
    return Execution.objects.get(pk=execution.pk).status


@pytest.fixture
def fleet(make_execution, make_operation):
    """Two started executions of ``install`` with a step running each, a failed one, a completed
    one, and a started one of ``demo``."""
    started = []
    for n in range(2):
        execution = make_execution(status=ExecutionStatus.STARTED, workflow_id="install", deployment_id=f"site-{n}")
        make_operation(OperationState.STARTED, execution, name="busy", attempt=1)
        started.append(execution)
    return {"started": started,
            "failed": make_execution(status=ExecutionStatus.FAILED, workflow_id="install"),
            "completed": make_execution(status=ExecutionStatus.COMPLETED, workflow_id="install"),
            "other": make_execution(status=ExecutionStatus.STARTED, workflow_id="demo")}


@pytest.mark.django_db
def test_cancel_executions_takes_the_lists_filters_and_prints_a_line_of_counts(fleet):
    out, err = command("cancel_executions", "--workflow-id", "install")
    assert out == "cancel: 2 done, 2 skipped (completed 1, failed 1), 0 refused, of 4 matching\n" and err == ""
    assert [status_of(e) for e in fleet["started"]] == ["cancelling"] * 2
    assert status_of(fleet["other"]) == "started"


@pytest.mark.django_db
def test_json_is_the_document_the_api_answers(fleet):
    out, _ = command("cancel_executions", "--status", "started", "--workflow-id", "install", "--dry-run", "--json")
    client = APIClient()
    client.force_authenticate(make_user("root", FORCER))
    answer = client.post("/api/v1/executions/bulk", {"action": "cancel", "dry_run": True,
                                                     "filter": {"status": "started", "workflow_id": "install"}},
                         format="json")
    assert out == answer.content.decode() + "\n"
    assert json.loads(out)["done"] == 2 and [status_of(e) for e in fleet["started"]] == ["started"] * 2


@pytest.mark.django_db
def test_the_stronger_options_take_the_stronger_action(fleet):
    assert command("cancel_executions", "--deployment-id", "site-0", "--force")[0].startswith("force-cancel: 1 done")
    assert status_of(fleet["started"][0]) == "cancelled"
    assert command("cancel_executions", "--deployment-id", "site-1", "--kill")[0].startswith("kill: 1 done")
    assert status_of(fleet["started"][1]) == "cancelled"
    out, _ = command("resume_executions", "--status", "cancelled", "--force", "--json")
    assert json.loads(out)["action"] == "force-resume" and json.loads(out)["done"] == 2
    assert [status_of(e) for e in fleet["started"]] == ["started"] * 2


@pytest.mark.django_db
def test_resume_executions_resumes_the_failed_ones(fleet):
    out, _ = command("resume_executions", "--status", "failed")
    assert out.startswith("resume: 1 done, 0 skipped") and status_of(fleet["failed"]) == "started"


@pytest.mark.django_db
def test_pause_executions_pauses_the_started_ones(fleet, outbox):
    """``pause`` is an action of the services: the command names it, nothing more."""
    out, _ = command("pause_executions", "--workflow-id", "install")
    assert out.startswith("pause: 2 done, 2 skipped") and [status_of(e) for e in fleet["started"]] == ["paused"] * 2


@pytest.mark.django_db
def test_all_is_needed_for_no_filter_and_list_executions_takes_the_same_filters(fleet):
    with pytest.raises(CommandError, match=r"give at least one filter \(--status, --workflow-id, .*\), or --all"):
        command("cancel_executions")
    assert status_of(fleet["other"]) == "started"
    assert command("cancel_executions", "--all", "--dry-run")[0].endswith("of 5 matching\n")
    listed = json.loads(command("list_executions", "--workflow-id", "install", "--status", "started", "--json")[0])
    assert sorted(e["id"] for e in listed) == sorted(str(e.pk) for e in fleet["started"])


@pytest.mark.integration
@pytest.mark.processes
def test_a_script_sees_its_counts_on_stdout_and_bad_input_as_one_line_on_stderr(transactional_db, tmp_path,
                                                                              make_execution, make_operation):
    env = child_environment(workflows={}, markers_dir=tmp_path)
    busy = make_execution(status=ExecutionStatus.STARTED, workflow_id="install")
    make_operation(OperationState.STARTED, busy, name="busy", attempt=1)
    make_execution(status=ExecutionStatus.COMPLETED, workflow_id="install")

    def manage(*args):
        return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120)

    done = manage("cancel_executions", "--workflow-id", "install", "--json")  # the real broker: the step is asked to stop
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["done"] == 1 and done.stderr == ""
    assert status_of(busy) == "cancelling"
    for args, says in [
        (["cancel_executions"], "CommandError: give at least one filter"),
        (["cancel_executions", "--status", "done"], "CommandError: --status must be one of pending, queued"),
        (["cancel_executions", "--created-before", "soon"], "CommandError: --created-before is not valid"),
        (["cancel_executions", "--parent", "x"], "CommandError: --parent is not valid: Enter a valid UUID."),
        (["cancel_executions", "--all", "--kill", "--force"], "error: argument --force: not allowed with argument --kill"),
        (["pause_executions", "--all", "--wait"], "error: unrecognized arguments: --wait"),
    ]:
        refused = manage(*args, "--json")
        assert refused.returncode != 0 and refused.stdout == "", (args, refused.stdout)
        assert refused.stderr.count("\n") == 1 and says in refused.stderr, (args, refused.stderr)


@pytest.mark.django_db
def test_a_refusal_is_counted_printed_and_exits_1(fleet, monkeypatch):
    """The status changed after the batch was read (here: the action meets it ended)."""
    from workflows_app import services
    from workflows_app.transitions import execution_transition

    cancel = services.ACTIONS["cancel"]

    def cancel_an_ended_one(pk, *, user=None):
        execution_transition(Execution.objects.get(pk=pk), ExecutionStatus.COMPLETED)
        return cancel(pk, user=user)

    monkeypatch.setitem(services.ACTIONS, "cancel", cancel_an_ended_one)
    out = io.StringIO()
    with pytest.raises(CommandError, match=r"^cancel: 1 of 1 refused \(status: completed 1\)$"):
        call_command("cancel_executions", "--deployment-id", "site-0", "--json", stdout=out)
    assert json.loads(out.getvalue())["refused"] == {"count": 1, "permission": 0, "status": {"completed": 1}, "gone": 0}
