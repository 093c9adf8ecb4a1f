"""Running an execution again from one of its steps (``services.rerun``, ``engine.reruns``):
the steps that did not follow from that step keep their stored results and do not run again —
imperative, graph and canvas workflows, run by the test harness."""

import pytest

from workflows_app import services
from workflows_app.errors import ExistingRunningExecution, ParameterError
from workflows_app.models import Execution, Wait


@pytest.fixture(autouse=True)
def with_the_rerun_workflows(settings):
    settings.SWITCHYARD_WORKFLOW_MODULES = ["tests.rerun_workflows"]


def attempts(result):
    return {name: operation.attempt for name, operation in result.operations.items()}


def run_imperative(switchyard, fail_at):
    result = switchyard.start("rr_imperative", {"fail_at": fail_at})
    switchyard.send_event(result, "go", "went")
    return switchyard.finish(result)


def test_an_imperative_rerun_runs_the_step_and_what_followed_it_and_keeps_the_rest(switchyard):
    failed = run_imperative(switchyard, fail_at="b")
    assert failed.status == "failed" and "c" not in failed.operations

    rerun = switchyard.rerun(failed, "b", {"fail_at": ""})

    assert rerun.status == "completed", rerun.error
    assert rerun.payload == {"ran": ["a", "side", "went", "b", "c"]}
    # a and side never ran again (attempt 0, their stored results); b and c ran.
    assert attempts(rerun) == {"a": 0, "side": 0, "b": 1, "c": 1}
    assert rerun.operations["a"].result == "a" and rerun.operations["a"].state == "succeeded"
    # The event it had taken before b was asked for is kept: no event was sent to the rerun.
    assert not [event for event in rerun.events if event.type == "event_received"]
    assert Wait.objects.get(execution_id=rerun.id, kind="event").payload == "went"
    execution = rerun.execution
    assert (execution.rerun_of_id, execution.rerun_from) == (failed.id, "b")
    assert execution.parameters == {"fail_at": ""}
    kept = [event for event in rerun.events if event.data.get("kept")]
    assert kept[0].data == {"rerun_of": str(failed.id), "from_step": "b", "kept": ["a", "side"]}


def test_a_rerun_from_the_first_awaited_step_runs_everything_that_followed_it(switchyard):
    completed = run_imperative(switchyard, fail_at="")
    rerun = switchyard.start("rr_imperative")  # a plain start for comparison: nothing kept
    assert attempts(rerun) == {"a": 1, "side": 1}

    again = services.rerun(completed.id, "a")
    result = switchyard.finish(switchyard.send_event(type(rerun)(again.pk), "go", "again"))
    assert result.status == "completed"
    assert set(attempts(result).values()) == {1}  # side followed a: it ran again too
    assert result.payload["ran"][2] == "again"


def test_the_original_parameters_are_kept_unless_given(switchyard):
    failed = run_imperative(switchyard, fail_at="c")
    assert failed.status == "failed"
    same = switchyard.rerun(failed, "c")
    assert same.execution.parameters == {"fail_at": "c"}
    assert same.status == "failed" and attempts(same) == {"a": 0, "side": 0, "b": 0, "c": 1}


def test_a_graph_rerun_keeps_what_does_not_depend_on_the_step(switchyard):
    failed = switchyard.run("rr_graph", {"fail_at": "b"})
    assert failed.status == "failed"
    assert failed.operations["c"].state == "cancelled"

    rerun = switchyard.rerun(failed, "b", {"fail_at": ""})
    assert rerun.status == "completed"
    assert rerun.payload == {"a": "a", "b": "b", "c": "c", "d": "d"}
    assert attempts(rerun) == {"a": 0, "b": 1, "c": 1, "d": 0}
    # The graph's edges hold in the rerun, kept steps included.
    assert sorted(rerun.operations["c"].depends_on.values_list("name", flat=True)) == ["b"]
    assert sorted(rerun.operations["b"].depends_on.values_list("name", flat=True)) == ["a"]


def test_a_canvas_rerun_passes_the_kept_results_on(switchyard):
    first = switchyard.run("rr_canvas", {"second": 10})
    assert first.payload == {"sum": 113}

    rerun = switchyard.rerun(first, "1:rr_add", {"second": 20})
    assert rerun.status == "completed"
    assert rerun.payload == {"sum": 123}
    assert attempts(rerun) == {"0:rr_add": 0, "1:rr_add": 1, "2:rr_add": 1}


def test_a_kept_step_whose_call_the_new_parameters_change_fails_the_rerun_naming_it(switchyard):
    first = switchyard.run("rr_canvas", {"second": 10})
    rerun = switchyard.rerun(first, "2:rr_add", {"second": 20})  # 1:rr_add is kept, with 10
    assert rerun.status == "failed"
    assert "non-deterministic workflow: step '1:rr_add'" in rerun.error


def test_the_original_lists_its_reruns(switchyard):
    first = switchyard.run("rr_canvas")
    one = switchyard.rerun(first, "2:rr_add")
    two = switchyard.rerun(first, "0:rr_add")
    assert sorted(first.refresh().execution.reruns.values_list("pk", flat=True)) == sorted([one.id, two.id])


@pytest.mark.parametrize("step", ["nope", "", None, 3])
def test_a_step_the_original_does_not_have_is_refused_and_nothing_is_stored(switchyard, step):
    first = switchyard.run("rr_canvas")
    with pytest.raises(ParameterError):
        services.rerun(first.id, step)
    assert Execution.objects.count() == 1


def test_parameters_that_do_not_fit_are_refused(switchyard):
    first = switchyard.run("rr_canvas")
    with pytest.raises(ParameterError):
        services.rerun(first.id, "0:rr_add", {"unknown": 1})
    assert Execution.objects.count() == 1


def test_an_unknown_execution_is_refused(db):
    with pytest.raises(Execution.DoesNotExist):
        services.rerun("00000000-0000-0000-0000-000000000000", "a")


def test_the_options_of_a_start_change_the_rerun_as_they_change_a_start(switchyard):
    first = switchyard.run("rr_canvas", {"second": 10})
    assert (first.execution.failure_mode, first.execution.wait_after_fail, first.execution.is_dry_run) == (
        "no_new_calls", 600, False)
    rerun = switchyard.rerun(first, "2:rr_add", failure_mode="fail_fast", wait_after_fail=5, timeout=90)
    assert (rerun.execution.failure_mode, rerun.execution.wait_after_fail, rerun.execution.timeout) == (
        "fail_fast", 5, 90)
    dry = switchyard.rerun(first, "2:rr_add", dry_run=True)
    assert dry.execution.is_dry_run and dry.operations["2:rr_add"].result is None
    assert dry.operations["1:rr_add"].result == 13  # kept: the stored result, not a dry run's


def test_a_rerun_on_a_busy_deployment_is_refused_queued_or_forced(switchyard):
    first = switchyard.run("rr_canvas", {"second": 10}, deployment_id="site-1")
    busy = switchyard.start("rr_imperative", deployment_id="site-1")  # waits for its event
    assert busy.status == "started"
    with pytest.raises(ExistingRunningExecution):
        services.rerun(first.id, "2:rr_add")
    queued = services.rerun(first.id, "2:rr_add", queue=True)
    assert queued.status == "queued"
    forced = switchyard.rerun(first, "2:rr_add", force=True)
    assert forced.status == "completed" and forced.execution.deployment_id == "site-1"
    elsewhere = switchyard.rerun(first, "2:rr_add", deployment_id="site-2")
    assert elsewhere.status == "completed" and elsewhere.execution.deployment_id == "site-2"
