"""The replay check (``engine.replaycheck.check``): today's code of a workflow against an
execution's exported history (``engine.history.export``), before a deploy.

Histories are made here by running executions with the dispatcher in this process; a "deploy"
sets the version of the code (tests/replay_workflows.py) before the check runs.
"""

import json

import pytest

from tests.engine.passes import run_pass, succeed
from workflows_app import services
from workflows_app.engine import history, replaycheck
from workflows_app.errors import HistoryRefused
from workflows_app.models import Event, Execution, Operation, OperationDependency, Wait
from workflows_app.states import ExecutionStatus, OperationState

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("outbox", "with_the_replay_workflows")]


def run_open_steps(execution) -> Execution:
    """Every step in flight succeeds, and a pass follows, until none is left in flight."""
    while True:
        open_steps = Operation.objects.filter(execution_id=execution.pk, state__in=[OperationState.SENDING,
                                                                                    OperationState.SENT])
        names = list(open_steps.values_list("name", flat=True))
        if not names:
            return execution
        for name in names:
            succeed(execution, name)
        execution = run_pass(execution)


def waiting_at_the_event() -> dict:
    """The history of an rc_deploy execution (of the code in place) that waits for ``go``."""
    execution = run_open_steps(run_pass(services.start("rc_deploy", {})))
    assert Wait.objects.filter(execution_id=execution.pk, key="event:go#1", outcome="waiting").exists()
    return json.loads(json.dumps(history.export(execution.pk)))  # as a file holds it


def completed(workflow="rc_deploy") -> dict:
    execution = run_open_steps(run_pass(services.start(workflow, {})))
    if execution.status == ExecutionStatus.STARTED:
        services.send_event(execution.pk, "go", "went")
        execution = run_open_steps(run_pass(execution))
    assert execution.status == ExecutionStatus.COMPLETED, execution.error
    return json.loads(json.dumps(history.export(execution.pk)))


# --- the history ------------------------------------------------------------------------------

def test_the_history_holds_what_a_replay_needs_and_no_token(deploy):
    deploy("2")
    document = completed()
    assert (document["format"], document["version"]) == ("switchyard.history", 1)
    assert document["execution"]["workflow_id"] == "rc_deploy"
    assert document["execution"]["status"] == "completed"
    assert "token_hash" not in document["execution"] and "token" not in json.dumps(document)
    assert [(s["name"], s["operation"], s["args"], s["state"], s["result"]) for s in document["steps"]] == [
        ("a", "rc_echo", ["a"], "succeeded", "a"), ("c", "rc_echo", ["c"], "succeeded", "c"),
        ("d", "rc_echo", ["d"], "succeeded", "d"), ("b", "rc_echo", ["b"], "succeeded", "b")]
    assert [(w["key"], w["kind"], w["outcome"], w["payload"]) for w in document["waits"]] == [
        ("event:go#1", "event", "received", "went")]
    assert document["patches"] == {"before-go": True, "after-go": True}


def test_a_graphs_dependencies_and_a_canvas_input_are_in_the_history():
    steps = {s["name"]: s for s in completed("rc_graph")["steps"]}
    assert steps["join"]["depends_on"] == ["p1", "p2"] and steps["p1"]["depends_on"] == []
    assert steps["1:rc_echo"]["input"] == {"result": "0:rc_echo"}


# --- what replays -----------------------------------------------------------------------------

def test_the_same_code_replays_its_histories():
    assert replaycheck.check(waiting_at_the_event()) is None
    assert replaycheck.check(completed()) is None


def test_a_change_behind_ctx_patched_replays_the_histories_from_before_it(deploy):
    waiting, done = waiting_at_the_event(), completed()
    deploy("2")
    assert replaycheck.check(waiting) is None
    assert replaycheck.check(done) is None


def test_a_history_made_after_the_change_replays_with_the_new_code(deploy):
    deploy("2")
    document = completed()
    assert replaycheck.check(document) is None


def test_retiring_a_patch_replays_the_histories_that_took_the_new_path_and_not_those_that_took_the_old(deploy):
    old_path = waiting_at_the_event()
    deploy("2")
    new_path = waiting_at_the_event()
    deploy("9")  # c and d asked unconditionally
    assert replaycheck.check(new_path) is None
    assert replaycheck.check(old_path) == (
        "non-deterministic workflow: this replay asked for step 'c', which the history does not hold, before "
        "reaching the history's wait 'event:go#1': the code takes another path than the one this execution took; "
        "guard the change with ctx.patched")


def test_code_that_goes_further_than_the_history_replays(deploy):
    # Step a succeeded and no pass has run since: the next pass goes on to the wait for go.
    execution = run_pass(services.start("rc_deploy", {}))
    succeed(execution, "a")
    assert replaycheck.check(history.export(execution.pk)) is None
    deploy("5")  # a new step after the last one
    assert replaycheck.check(completed()) is None


def test_an_exception_past_the_end_of_the_history_is_not_the_replays_concern(deploy):
    document = completed()
    deploy("8")
    assert replaycheck.check(document) is None


# --- what does not replay ----------------------------------------------------------------------

def test_a_step_asked_with_other_arguments_fails_with_the_guards_message(deploy):
    document = completed()
    deploy("4")
    assert replaycheck.check(document) == (
        "non-deterministic workflow: step 'b' was stored as rc_echo args=['b'] kwargs={}, and this replay asked "
        "for rc_echo args=['B'] kwargs={}; workflow code must ask for the same steps, with the same operations "
        "and arguments, in the same order on every run")


def test_a_step_inserted_without_ctx_patched_fails_naming_it(deploy):
    document = waiting_at_the_event()
    deploy("3")
    assert replaycheck.check(document) == (
        "non-deterministic workflow: this replay asked for step 'c', which the history does not hold, before "
        "reaching the history's wait 'event:go#1': the code takes another path than the one this execution took; "
        "guard the change with ctx.patched")


def test_going_back_to_the_code_before_a_change_fails_on_the_histories_made_after_it(deploy):
    deploy("2")
    document = completed()
    deploy("1")
    assert replaycheck.check(document) == (
        "non-deterministic workflow: the workflow function returned before reaching the history's step 'c', "
        "step 'd': the code no longer asks for what this execution stored")


def test_code_that_returns_or_raises_before_the_end_of_the_history_fails(deploy):
    document = waiting_at_the_event()
    deploy("6")
    assert replaycheck.check(document) == (
        "non-deterministic workflow: the workflow function returned before reaching the history's step 'a', "
        "wait 'event:go#1': the code no longer asks for what this execution stored")
    deploy("7")
    assert replaycheck.check(document) == (
        "non-deterministic workflow: the workflow function raised RuntimeError: a bug in the new code before "
        "reaching the history's step 'a', wait 'event:go#1': the code changed where this execution had gone on")


def test_a_changed_graph_or_canvas_fails_naming_its_step(deploy):
    document = completed("rc_graph")
    assert replaycheck.check(document) is None
    deploy("2")
    assert replaycheck.check(document).startswith(
        "non-deterministic workflow: step 'p2' was stored as rc_echo args=['p2'] kwargs={}, and this replay asked "
        "for rc_echo args=['P2'] kwargs={}")
    deploy("3")
    assert replaycheck.check(document).startswith(
        "non-deterministic workflow: step '0:rc_echo' was stored as rc_echo args=['y'] kwargs={}, and this replay "
        "asked for rc_echo args=['Y'] kwargs={}")


def test_a_workflow_that_is_no_longer_registered_fails():
    document = completed()
    document["execution"]["workflow_id"] = "rc_gone"
    assert replaycheck.check(document).startswith("today's code cannot run this history: ")
    assert "rc_gone" in replaycheck.check(document)


# --- nothing of the check is kept or sent ---------------------------------------------------------

def counts():
    return tuple(model.objects.count() for model in (Execution, Operation, OperationDependency, Wait, Event))


def test_the_check_keeps_nothing_and_sends_nothing(deploy, outbox, django_capture_on_commit_callbacks):
    documents = [waiting_at_the_event(), completed(), completed("rc_graph")]
    before, sent = counts(), {kind: list(items) for kind, items in outbox.items()}
    deploy("5")  # goes further than the completed history: a new step "e"
    with django_capture_on_commit_callbacks() as callbacks:
        verdicts = [replaycheck.check(document) for document in documents]
    deploy("3")  # fails on the first two
    with django_capture_on_commit_callbacks() as more_callbacks:
        verdicts += [replaycheck.check(document) for document in documents]
    assert verdicts == [None, None, None, verdicts[3], verdicts[4], verdicts[5]]
    assert "step 'c'" in verdicts[3] and "step 'c'" in verdicts[4] and "step '0:rc_echo'" in verdicts[5]
    assert counts() == before
    assert outbox == sent
    assert callbacks == [] and more_callbacks == []


@pytest.mark.django_db(transaction=True)
def test_the_check_commits_nothing_outside_a_tests_transaction(deploy, outbox):
    document = waiting_at_the_event()
    services.send_event(Execution.objects.get().pk, "go", "went")  # delivered; no pass took it yet
    before, sent = counts(), {kind: list(items) for kind, items in outbox.items()}
    deploy("5")
    assert replaycheck.check(document) is None
    assert counts() == before
    assert outbox == sent
    assert Wait.objects.get().outcome == "waiting"  # the check's replay took no event


# --- documents that are not histories ---------------------------------------------------------------

@pytest.mark.parametrize("change, reason", [
    (lambda d: d.update(format="other"), "its \"format\" is not 'switchyard.history'"),
    (lambda d: d.update(version=2), "its \"version\" is 2; this version of Switchyard reads version 1"),
    (lambda d: d.pop("execution"), '"execution" is not an object'),
    (lambda d: d["steps"][0].pop("name"), '"steps[0]" has no name'),
    (lambda d: d["steps"][0].update(state="sleeping"), '"steps[0]" has an unknown state'),
    (lambda d: d["steps"][0].update(attempt="one"), '"steps[0]": attempt is not a whole number'),
    (lambda d: d["steps"][1].update(name="a"), "two steps have the same name"),
    (lambda d: d["steps"][0].update(depends_on=["nope"]), '"steps[0]" depends on a step the history does not hold'),
    (lambda d: d["steps"][0].update(name="x" * 256), '"steps[0]": name is longer than 255 characters, or holds '
                                                     "characters no database stores"),
    (lambda d: d["steps"][0].update(result="\x00"), '"steps[0]".result: null characters (\\u0000) are not allowed'),
    (lambda d: d["waits"][0].update(deadline="tomorrow"), '"waits[0]": deadline is not a time'),
    (lambda d: d.update(patches={"x": "yes"}), '"patches" is not an object of true and false'),
])
def test_a_document_that_is_not_a_history_is_refused_saying_why(change, reason):
    document = completed()
    change(document)
    with pytest.raises(HistoryRefused) as refused:
        replaycheck.check(document)
    assert str(refused.value) == f"not an execution history: {reason}"
