"""``ctx.patched(change_id)``: true where an execution reaches the call for the first time with
the change deployed, false where it had passed that point before; stored the first time.

The dispatcher runs in this process (``run_pass``), the agents' outcomes are recorded here, and
what the engine would send is recorded instead (``outbox``). A "deploy" sets the code's version
(tests/replay_workflows.py) and drops the live runs this process keeps, as new processes have
none. The same story across a real manager restart: tests/integration/test_code_change.py.
"""

import pytest
from django.db.models import F

from tests.engine.passes import run_pass, succeed
from workflows_app import services
from workflows_app.engine import history, live, patches
from workflows_app.models import Execution, Operation
from workflows_app.states import ExecutionStatus

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("outbox", "each_pass", "with_the_replay_workflows")]


def step_names(execution) -> list:
    return list(Operation.objects.filter(execution_id=execution.pk).order_by("pending_at", "id")
                .values_list("name", flat=True))


def start(workflow) -> Execution:
    return run_pass(services.start(workflow, {}))


def run_until_event(execution, *names) -> Execution:
    """Run steps ``names``, one pass after each: the execution then waits for ``go``."""
    for name in names:
        succeed(execution, name)
        execution = run_pass(execution)
    assert execution.status == ExecutionStatus.STARTED
    return execution


def finish(execution, *names) -> Execution:
    """Deliver ``go``, then run steps ``names``, one pass after each: it completed."""
    services.send_event(execution.pk, "go", "went")
    execution = run_pass(execution)
    for name in names:
        succeed(execution, name)
        execution = run_pass(execution)
    assert execution.status == ExecutionStatus.COMPLETED, execution.error
    return execution


def test_an_execution_that_reaches_the_call_first_with_the_change_takes_the_new_path(deploy):
    deploy("2")
    execution = run_until_event(start("rc_deploy"), "a", "c")
    assert execution.patches == {"before-go": True}
    execution = finish(execution, "d", "b")
    assert execution.payload == {"ran": ["a", "c", "d", "b"], "go": "went"}
    assert execution.patches == {"before-go": True, "after-go": True}
    assert step_names(execution) == ["a", "c", "d", "b"]


def test_an_execution_that_had_passed_the_point_keeps_its_old_path_and_one_that_had_not_takes_the_new(deploy):
    execution = run_until_event(start("rc_deploy"), "a")  # version 1: a, then waits for go
    deploy("2")
    # "before-go" is behind it (its wait for go is stored after that point): false. "after-go"
    # comes after everything it stored (it had not reached that point): true.
    execution = finish(execution, "d", "b")
    assert execution.payload == {"ran": ["a", "d", "b"], "go": "went"}
    assert execution.patches == {"before-go": False, "after-go": True}
    assert step_names(execution) == ["a", "d", "b"]


def test_a_change_id_asked_twice_gets_the_first_answer_where_the_rule_would_now_say_otherwise(deploy):
    execution = run_until_event(start("rc_twice"), "a", "b")  # version 1: a, b, waits for go
    deploy("2")
    execution = run_pass(execution)
    # The first ask is before the stored steps (false, stored); the second comes after all of
    # them, where a first ask would be true: it gets the stored answer.
    assert execution.payload == {"first": False, "second": False}
    assert execution.patches == {"x": False}


def test_a_change_id_asked_twice_in_a_new_execution_is_true_both_times(deploy):
    deploy("2")
    execution = run_until_event(start("rc_twice"), "a", "b")
    assert execution.payload == {"first": True, "second": True}
    assert execution.patches == {"x": True}


def test_the_stored_answer_holds_on_every_later_replay(deploy):
    execution = run_until_event(start("rc_deploy"), "a")
    deploy("2")
    services.send_event(execution.pk, "go", "went")
    execution = run_pass(execution)  # stores before-go: false, after-go: true; d is sent
    assert execution.patches == {"before-go": False, "after-go": True}
    for _ in range(2):
        live.clear()  # a replay from the top each time
        execution = run_pass(execution)
        assert execution.patches == {"before-go": False, "after-go": True}
        assert step_names(execution) == ["a", "d"]


def test_a_patched_call_before_anything_else_is_true_in_a_new_execution_and_false_in_an_old_one(deploy):
    old = start("rc_first_thing")  # version 1: "a" is stored, and the code asks for no patch
    deploy("2")
    new = start("rc_first_thing")
    assert new.patches == {"first": True}
    for execution in (old, new):
        succeed(execution, "a")
    assert run_pass(new).payload == {"answer": True, "a": "a"}
    old = run_pass(old)
    assert old.payload == {"answer": False, "a": "a"} and old.patches == {"first": False}


@pytest.mark.parametrize("case, error", [
    ("number", "TypeError: a change id is a string, not int (42)"),
    ("none", "TypeError: a change id is a string, not NoneType (None)"),
    ("empty", "ValueError: a change id names the change: not an empty or blank string ('')"),
    ("blank", "ValueError: a change id names the change: not an empty or blank string ('   ')"),
    ("long", "ValueError: a change id has at most 200 characters, not 201"),
    ("nul", "workflows_app.errors.ValueRefused: a change id: null characters (\\u0000) are not allowed"),
])
def test_a_change_id_that_is_not_one_is_refused_in_the_workflow_code(case, error):
    execution = run_pass(services.start("rc_bad_patch", {"case": case}))
    assert execution.status == ExecutionStatus.FAILED
    assert execution.error.splitlines()[-1] == error
    assert execution.patches == {}


def test_the_longest_change_id_is_taken():
    assert patches.check_change_id("x" * patches.MAX_CHANGE_ID_LENGTH) == "x" * 200


def test_a_retired_patch_whose_marker_is_no_longer_asked_holds_no_later_patch_back(deploy):
    deploy("2")
    execution = run_until_event(start("rc_deploy"), "a", "c")
    deploy("9")  # both patches retired (their steps asked unconditionally), a new one after b
    execution = finish(execution, "d", "b", "e")
    assert execution.payload == {"ran": ["a", "c", "d", "b", "e"], "go": "went"}
    assert execution.patches == {"before-go": True, "after-b": True}


def test_a_live_run_overtaken_by_a_pass_elsewhere_still_knows_what_it_had_reached(deploy):
    deploy("2")
    execution = start("rc_deploy")
    Execution.objects.filter(pk=execution.pk).update(passes=F("passes") + 1)  # a pass in another process
    succeed(execution, "a")
    execution = run_pass(execution)  # a live run reads every step again: "a" is behind it, not ahead
    assert execution.patches == {"before-go": True}
    assert step_names(execution) == ["a", "c"]


def test_the_answers_are_part_of_the_exported_history(deploy):
    execution = run_until_event(start("rc_deploy"), "a")
    deploy("2")
    execution = finish(execution, "d", "b")
    assert history.export(execution.pk)["patches"] == {"before-go": False, "after-go": True}
