"""The ``switchyard`` fixture: workflows run to their end inside a test, on its database, with
the test's clock."""

import json
import os
from datetime import datetime, timedelta, timezone

import pytest

from tests.replay_workflows import CODE_VERSION_ENV
from tests.testing.workflows import harness_add, harness_charge, harness_order
from workflows_app.models import Execution
from workflows_app.sdk import NonRecoverableError, RecoverableError
from workflows_app.testing.harness import Harness, HarnessError


def test_a_workflow_runs_to_its_end_and_its_hour_long_sleep_elapses_at_once(switchyard):
    result = switchyard.run(harness_order, {"n": 8})

    assert result.status == "completed"
    assert result.payload == {"total": 28, "charged": 28}
    assert [result.result(f"add-{i}") for i in range(8)] == [0, 1, 3, 6, 10, 15, 21, 28]
    assert {op.state for op in result.operations.values()} == {"succeeded"}
    # The test's clock went past the sleep; the stored times are the test's.
    assert result.execution.ended_at - result.execution.started_at >= timedelta(hours=1)
    assert result.operations["charge"].started_at - result.operations["add-7"].succeeded_at >= timedelta(hours=1)
    assert result.event_types()[-1] == "workflow_completed"


def test_start_leaves_the_clock_to_the_test(switchyard):
    result = switchyard.start("harness_order", {"n": 2})
    assert result.status == "started"
    assert sorted(result.operations) == ["add-0", "add-1"]

    switchyard.advance(seconds=3599)
    assert "charge" not in result.refresh().operations

    switchyard.advance(seconds=1)
    assert result.refresh().status == "completed"
    assert result.payload == {"total": 1, "charged": 1}


def test_a_fake_that_raises_once_is_retried_after_the_operations_own_back_off(switchyard):
    charge = switchyard.fake(harness_charge, raises=RecoverableError("the card service is busy"), times=1,
                             returns={"charged": "fake"})
    result = switchyard.run(harness_order, {"n": 1})

    assert result.status == "completed"
    assert result.payload == {"total": 0, "charged": "fake"}
    assert charge.calls == [((0,), {}), ((0,), {})]
    operation = result.operations["charge"]
    assert operation.attempt == 2
    assert operation.started_at - operation.rescheduled_at >= timedelta(seconds=600)  # harness_charge's retry_interval


def test_a_fake_that_always_raises_fails_the_execution_naming_the_step(switchyard):
    switchyard.fake("harness_add", raises=NonRecoverableError("no arithmetic today"))
    result = switchyard.run(harness_order)

    assert result.status == "failed"
    assert "add-0" in result.error and "no arithmetic today" in result.error
    assert result.operations["add-0"].state == "failed"
    assert "charge" not in result.operations


def test_fakes_return_a_copy_and_are_gone_with_the_harness(switchyard):
    fake = switchyard.fake(harness_add, returns=7)
    assert switchyard.run(harness_order, {"n": 2}).payload == {"total": 7, "charged": 7}
    assert len(fake.calls) == 2

    switchyard.__exit__(None, None, None)
    assert harness_add.func(None, 2, 3) == 5
    switchyard.__enter__()


@pytest.mark.parametrize("kwargs, error", [
    ({"times": 1}, ValueError),
    ({"raises": RecoverableError("x"), "times": 0}, ValueError),
    ({"raises": RecoverableError("x"), "times": True}, ValueError),
    ({"raises": RecoverableError}, TypeError),
    ({"returns": {1, 2}}, TypeError),
])
def test_a_fake_is_refused_what_it_could_not_do(switchyard, kwargs, error):
    with pytest.raises(error):
        switchyard.fake(harness_add, **kwargs)


def test_an_event_sent_by_the_test_reaches_the_waiting_workflow(switchyard):
    result = switchyard.start("harness_approval")
    assert result.status == "started"

    switchyard.send_event(result, "approved", {"user": "ann"})
    assert result.status == "completed"
    assert result.payload == {"approved_by": "ann"}


def test_an_event_waits_timeout_elapses_when_the_test_runs_it_to_its_end(switchyard):
    result = switchyard.run("harness_approval", {"timeout": 86400})
    assert result.status == "completed"
    assert result.payload == {"approved_by": None}
    assert result.execution.ended_at - result.execution.started_at >= timedelta(days=1)


def test_an_event_waits_timeout_elapses_only_when_the_clock_passes_it(switchyard):
    result = switchyard.start("harness_approval", {"timeout": 60})
    switchyard.advance(seconds=59)
    assert result.refresh().status == "started"
    switchyard.advance(minutes=1)
    assert result.refresh().payload == {"approved_by": None}


def test_an_execution_timeout_elapses_on_the_tests_clock(switchyard):
    result = switchyard.run("harness_forever", timeout=120)
    assert result.status == "timed_out"


def test_a_workflow_that_only_the_test_can_end_is_reported(switchyard):
    with pytest.raises(HarnessError, match="cannot end"):
        switchyard.run("harness_forever")


def test_a_cancel_ends_a_waiting_workflow(switchyard):
    result = switchyard.start("harness_forever")
    assert switchyard.cancel(result).status == "cancelled"


def test_operations_of_an_agent_run_in_process_through_its_claim_and_reports(switchyard):
    result = switchyard.run("harness_warehouse", {"skus": ["apple", "pear"]})

    assert result.status == "completed"
    assert result.payload == {"reserved": ["reserve-apple", "reserve-pear"]}
    for name in ("reserve-apple", "reserve-pear"):
        operation = result.operations[name]
        assert (operation.agent, operation.attempt, operation.state) == ("warehouse", 2, "succeeded")
        assert operation.result == {"marker": name.split("-")[1], "attempt": 2, "pid": os.getpid()}
    logs = [event for event in result.events if event.type == "log" and event.message == "got through"]
    assert [event.data for event in logs] == [{"attempt": 2}, {"attempt": 2}]


def test_the_clock_does_not_go_back(switchyard):
    with pytest.raises(ValueError):
        switchyard.advance(seconds=-1)


def test_a_result_names_the_steps_it_has(switchyard):
    result = switchyard.run(harness_order, {"n": 1})
    with pytest.raises(HarnessError, match="add-0"):
        result.result("add-9")


def test_a_history_exported_in_a_test_is_checked_against_changed_code(switchyard, settings, monkeypatch, tmp_path):
    settings.SWITCHYARD_WORKFLOW_MODULES = ["tests.replay_workflows"]
    monkeypatch.setenv(CODE_VERSION_ENV, "1")
    waiting = switchyard.start("rc_deploy")  # step a, then the event "go"
    assert waiting.status == "started" and sorted(waiting.operations) == ["a"]
    history = switchyard.export(waiting)
    path = tmp_path / "rc_deploy.json"
    path.write_text(json.dumps(history))

    monkeypatch.setenv(CODE_VERSION_ENV, "2")  # the new step behind ctx.patched
    switchyard.replay_check(history, path)

    monkeypatch.setenv(CODE_VERSION_ENV, "3")  # the same step, unguarded
    with pytest.raises(HarnessError, match=r"2 of 2 histories") as refused:
        switchyard.replay_check(history, str(path))
    assert "step 'c'" in str(refused.value) and str(path) in str(refused.value)
    assert Execution.objects.count() == 1  # the check kept nothing


def test_child_workflows_run_to_their_end_in_the_harness_too(switchyard):
    result = switchyard.run("harness_parent", {"children": 3})
    assert result.status == "completed", result.error
    children = Execution.objects.filter(parent_id=result.id)
    assert sorted(child.status for child in children) == ["completed"] * 3
    assert result.payload == {"children": [{"sum": 1}, {"sum": 2}, {"sum": 3}]}  # each child's payload
    assert all(child.ended_at - child.started_at >= timedelta(seconds=30) for child in children)


def test_a_harness_clock_starts_where_it_is_told(db):
    start = datetime(2030, 3, 31, 0, 59, 30, tzinfo=timezone.utc)
    with Harness(start=start) as harness:
        result = harness.run("harness_order", {"n": 1})
    # The sleep's hour; otherwise a microsecond each time the clock is read.
    assert start < result.execution.started_at < start + timedelta(seconds=1)
    assert start + timedelta(hours=1) < result.execution.ended_at < start + timedelta(hours=1, seconds=1)


def test_the_limits_of_an_operation_hold_in_the_harness_and_its_clock_moves_to_the_next_window(switchyard):
    result = switchyard.run("harness_limited_fan_out", {"n": 4})

    assert result.status == "completed" and result.payload == {"sum": 6}
    sends = sorted(op.sending_at for op in result.operations.values())
    assert sends[2] - sends[0] >= timedelta(minutes=1) and sends[3] - sends[1] >= timedelta(minutes=1), \
        "two a minute, on the test's clock"
    ends = sorted((op.sending_at, op.succeeded_at) for op in result.operations.values())
    assert all(later[0] >= earlier[1] for earlier, later in zip(ends, ends[1:])), "one at a time"
