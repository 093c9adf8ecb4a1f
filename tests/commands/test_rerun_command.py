"""``manage.py start_execution --rerun-of ID --from-step NAME``."""

import io

import pytest
from django.core.management import CommandError, call_command

from workflows_app.models import Execution
from workflows_app.testing.harness import Result


@pytest.fixture(autouse=True)
def with_the_rerun_workflows(settings):
    settings.SWITCHYARD_WORKFLOW_MODULES = ["tests.rerun_workflows"]


def test_the_command_reruns_an_execution_named_by_the_start_of_its_id(switchyard, django_capture_on_commit_callbacks):
    first = switchyard.run("rr_canvas", {"second": 10})
    out = io.StringIO()
    with django_capture_on_commit_callbacks(execute=True):
        call_command("start_execution", "--rerun-of", str(first.id)[:8], "--from-step", "1:rr_add",
                     "--param", "second=20", stdout=out)
    rerun = switchyard.finish(Result(out.getvalue().strip()))
    assert rerun.status == "completed" and rerun.payload == {"sum": 123}
    assert (rerun.execution.rerun_of_id, rerun.execution.rerun_from) == (first.id, "1:rr_add")
    assert rerun.execution.created_by == "manage.py"


def test_without_params_the_rerun_takes_the_originals(switchyard):
    first = switchyard.run("rr_canvas", {"second": 5})
    out = io.StringIO()
    call_command("start_execution", "--rerun-of", str(first.id), "--from-step", "2:rr_add", stdout=out)
    assert Execution.objects.get(pk=out.getvalue().strip()).parameters == {"second": 5}


@pytest.mark.parametrize("argv, message", [
    (["--from-step", "a"], "name the workflow to start, or --rerun-of"),
    (["rr_canvas", "--rerun-of", "FIRST", "--from-step", "0:rr_add"], "not both"),
    (["--rerun-of", "FIRST"], "--rerun-of and --from-step go together"),
    (["rr_canvas", "--from-step", "0:rr_add"], "--rerun-of and --from-step go together"),
    (["--rerun-of", "FIRST", "--from-step", "nope"], "no step 'nope'"),
    (["--rerun-of", "0000dead", "--from-step", "0:rr_add"], "no execution '0000dead'"),
    (["--rerun-of", "FIRST", "--from-step", "0:rr_add", "--param", "second=ten"], "parameter 'second'"),
    (["--rerun-of", "FIRST", "--from-step", "a\x00b"], r"no step 'a\\x00b'"),
    (["--rerun-of", "FIRST", "--from-step", "x" * (3 * 1024 * 1024)], "no step 'xxx"),
    (["--rerun-of", "FIRST", "--from-step", "0:rr_add", "--param", "second=NaN"], "--param second"),
])
def test_a_rerun_that_cannot_be_is_one_line_and_stores_nothing(switchyard, argv, message):
    first = switchyard.run("rr_canvas")
    argv = [str(first.id) if arg == "FIRST" else arg for arg in argv]
    with pytest.raises(CommandError, match=message) as refused:
        call_command("start_execution", *argv, stdout=io.StringIO())
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 1000
    assert Execution.objects.count() == 1
