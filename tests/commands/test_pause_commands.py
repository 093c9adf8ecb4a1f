"""pause_execution, unpause_execution, pause_workflow, unpause_workflow: what each prints, and a
one-line error (exit 1) for what is refused."""

import io
import json

import pytest
from django.core.management import CommandError, call_command

from workflows_app.models import Execution, PausedWorkflow
from workflows_app.states import ExecutionStatus

pytestmark = pytest.mark.django_db


def command(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_pause_then_unpause_an_execution(make_execution):
    execution = make_execution(status=ExecutionStatus.STARTED)
    assert command("pause_execution", str(execution.pk)) == f"{execution.pk} paused\n"
    assert json.loads(command("unpause_execution", str(execution.pk), "--json"))["status"] == "started"
    assert Execution.objects.get(pk=execution.pk).status == "started"


def test_a_refused_pause_is_one_line(make_execution):
    execution = make_execution(status=ExecutionStatus.COMPLETED)
    with pytest.raises(CommandError, match=rf"^cannot pause execution {execution.pk}: it is completed \(pause is allowed from started\)$"):
        command("pause_execution", str(execution.pk))


def test_pause_then_unpause_a_workflow():
    assert command("pause_workflow", "demo") == "demo paused\n"
    assert PausedWorkflow.objects.filter(workflow_id="demo").exists()
    with pytest.raises(CommandError, match="^cannot pause workflow demo: it is paused$"):
        command("pause_workflow", "demo")
    assert command("unpause_workflow", "demo") == "demo unpaused: 0 queued execution(s) started\n"
    with pytest.raises(CommandError, match="no_such"):
        command("pause_workflow", "no_such")
