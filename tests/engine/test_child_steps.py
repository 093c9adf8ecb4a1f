"""Child executions, with the dispatcher run in this process: a parent's step starts
a child, follows it, and a stop or a resume of the parent goes down the tree.

Messages the engine would send are recorded (``outbox``) and delivered here: an ``advance`` runs
the dispatcher, an operation's message is "run" by recording its result as its agent would
(its claim, then its success or its failure). Transactions commit for real, so the receivers of
committed status changes (the wake-up of a parent) run as they do in a manager.
"""

import time

import pytest
from django.test import override_settings
from django.utils import timezone

from tests import workflows as workflows_module
from workflows_app import services
from workflows_app.engine import children, dispatcher, live, reports
from workflows_app.models import Event, Execution, Operation
from workflows_app.states import EventType, ExecutionStatus, OperationState, StepKind

pytestmark = [pytest.mark.django_db(transaction=True)]

PARENT = {"agent": "a1", "other_agent": "a2"}


@pytest.fixture(autouse=True)
def setup(outbox):
    live.clear()
    workflows_module.CALLS.clear()
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=["tests.workflows"]):
        yield
    live.clear()


class Tree:
    """Delivers the outbox: ``run()`` advances every execution woken and runs every operation
    sent, until nothing moves; ``fails`` names the steps (``<tag>``, the first argument) that fail
    for good, ``holds`` those left running (claimed, no result); the wake-ups of the executions
    in ``lost`` are dropped, as if lost with their sender."""

    def __init__(self, outbox):
        self.outbox, self.fails, self.holds, self.lost = outbox, set(), set(), set()

    def run(self, rounds=200):
        for _ in range(rounds):
            moved = False
            while self.outbox["advance"]:
                pk = self.outbox["advance"].pop(0)
                if pk not in self.lost:  # a wake-up lost with its process
                    dispatcher.run_pass(pk)
                moved = True
            sent = Operation.objects.filter(kind=StepKind.OPERATION, state__in=[OperationState.SENDING, OperationState.SENT])
            for operation in sent:
                moved = True
                self._run(operation)
            if not moved:
                return
        raise AssertionError("the tree never settled")

    def _run(self, operation):
        Operation.objects.filter(pk=operation.pk).update(state=OperationState.STARTED, started_at=timezone.now())
        operation.refresh_from_db()
        tag = operation.args[0]
        if tag in self.holds:
            return
        if tag in self.fails:
            reports.record_failure(operation, operation.attempt, {"type": "NonRecoverableError", "message": f"{tag} fails",
                                                                  "traceback": ""}, retryable=False)
        else:
            reports.record_success(operation, operation.attempt, tag)

    def finish_held(self):
        """The held steps end now (they saw the cancel and returned)."""
        for operation in Operation.objects.filter(kind=StepKind.OPERATION, state=OperationState.STARTED):
            reports.record_success(operation, operation.attempt, "stopped")
        self.holds.clear()


@pytest.fixture
def tree(outbox):
    return Tree(outbox)


def child_of(parent, step) -> Execution:
    return Execution.objects.get(parent_id=parent.pk, parent_step=step)


def terminal_event(execution) -> Event:
    return Event.objects.filter(execution_id=execution.pk, type__in=[
        EventType.WORKFLOW_COMPLETED, EventType.WORKFLOW_FAILED, EventType.WORKFLOW_CANCELLED,
        EventType.WORKFLOW_TIMED_OUT]).get()


def test_a_parent_runs_three_children_and_combines_their_payloads(tree):
    parent = services.start("it_parent", PARENT)
    tree.run()
    parent.refresh_from_db()
    assert parent.status == ExecutionStatus.COMPLETED
    assert parent.payload == {"children": ["c0", "c1", "c2"]}
    kids = list(Execution.objects.filter(parent_id=parent.pk).order_by("parent_step"))
    assert [(kid.parent_step, kid.workflow_id, kid.status) for kid in kids] == [
        (f"child{i}", "it_child", ExecutionStatus.COMPLETED) for i in range(3)]
    assert Execution.objects.count() == 4  # every replay awaited the stored children, none started twice
    for i, kid in enumerate(kids):
        step = Operation.objects.get(execution_id=parent.pk, name=f"child{i}")
        assert (step.kind, step.operation, step.state, step.agent) == (StepKind.WORKFLOW, "it_child", OperationState.SUCCEEDED, "")
        assert step.result == kid.payload == {"tag": f"c{i}", "results": [f"c{i}-first", f"c{i}-second"]}
        assert kid.parameters == {"agent": "a1", "other_agent": "a2", "tag": f"c{i}", "fail": False, "seconds": 0.0}
        assert list(Operation.objects.filter(execution_id=kid.pk).values_list("name", "agent")) == [("first", "a1"), ("second", "a2")]
        # Its step went through every state, one event each, and ended after the child did.
        types = list(Event.objects.filter(execution_id=parent.pk, operation=f"child{i}").values_list("type", flat=True))
        assert types == ["task_sending", "child_started", "task_sent", "task_started", "task_succeeded"]
        assert terminal_event(kid).pk < Event.objects.get(execution_id=parent.pk, operation=f"child{i}", type="task_succeeded").pk


def test_an_uncaught_failed_child_fails_its_parent_with_the_childs_error(tree):
    tree.fails.add("c1-second")
    parent = services.start("it_parent", {**PARENT, "failing": [1]})
    tree.run()
    parent.refresh_from_db()
    kid = child_of(parent, "child1")
    assert kid.status == ExecutionStatus.FAILED and "c1-second fails" in kid.error
    assert parent.status == ExecutionStatus.FAILED
    assert "child1" in parent.error and "ChildFailed" in parent.error and "c1-second fails" in parent.error
    step = Operation.objects.get(execution_id=parent.pk, name="child1")
    assert step.state == OperationState.FAILED and step.error["child"] == str(kid.pk)


def test_a_parent_catches_a_failed_child_and_compensates(tree):
    tree.fails.add("c1-second")
    parent = services.start("it_parent", {**PARENT, "failing": [1], "catch": True})
    tree.run()
    parent.refresh_from_db()
    assert parent.status == ExecutionStatus.COMPLETED
    assert parent.payload == {"children": ["c0", None, "c2"]}
    assert Operation.objects.get(execution_id=parent.pk, name="undo-child1").state == OperationState.SUCCEEDED


def test_cancel_of_a_parent_cancels_its_children_first_and_waits_for_them(tree):
    tree.holds.update({"c0-first", "c1-first", "c2-first"})
    parent = services.start("it_parent", PARENT)
    tree.run()
    kids = list(Execution.objects.filter(parent_id=parent.pk))
    assert len(kids) == 3 and all(kid.status == ExecutionStatus.STARTED for kid in kids)

    assert services.cancel(parent.pk).status == ExecutionStatus.CANCELLING
    for kid in kids:
        kid.refresh_from_db()
        assert kid.status == ExecutionStatus.CANCELLING  # their running steps are awaited
    tree.run()
    parent.refresh_from_db()
    assert parent.status == ExecutionStatus.CANCELLING

    tree.finish_held()
    tree.run()
    parent.refresh_from_db()
    assert parent.status == ExecutionStatus.CANCELLED
    for kid in kids:
        kid.refresh_from_db()
        assert kid.status == ExecutionStatus.CANCELLED
        assert terminal_event(kid).pk < terminal_event(parent).pk
    assert set(Operation.objects.filter(execution_id=parent.pk).values_list("state", flat=True)) == {OperationState.CANCELLED}


@pytest.mark.parametrize("action", ["kill", "force-cancel"])
def test_kill_and_force_cancel_of_a_parent_end_the_whole_tree_at_once(tree, outbox, action):
    tree.holds.add("leaf.0.0")
    parent = services.start("it_tree", {"agent": "a1", "depth": 3})
    tree.run()
    middle = child_of(parent, "sub0")
    bottom = child_of(middle, "sub0")
    leaf = Operation.objects.get(execution_id=bottom.pk, name="leaf")
    assert leaf.state == OperationState.STARTED
    outbox["kill"].clear()

    assert services.ACTIONS[action](parent.pk).status == ExecutionStatus.CANCELLED
    for execution in (bottom, middle):
        execution.refresh_from_db()
        assert execution.status == ExecutionStatus.CANCELLED
    assert terminal_event(bottom).pk < terminal_event(middle).pk < terminal_event(parent).pk
    leaf.refresh_from_db()
    assert leaf.state == OperationState.CANCELLED
    signalled = [attempt for kill in outbox["kill"] for attempt in kill]
    if action == "kill":  # the leaf's processes are signalled; a force-cancel leaves them be
        assert (str(leaf.pk), leaf.attempt) in signalled
        assert Operation.objects.get(execution_id=middle.pk, name="sub0").error["type"] == "Killed"
    else:
        assert (str(leaf.pk), leaf.attempt) not in signalled


@pytest.mark.parametrize("how, status", [("fail", ExecutionStatus.FAILED), ("cancel", ExecutionStatus.CANCELLED),
                                         ("return", ExecutionStatus.COMPLETED)])
def test_a_child_the_parent_leaves_running_is_stopped_like_a_running_step(tree, how, status):
    tree.holds.add("left")
    parent = services.start("it_child_left_running", {"agent": "a1", "how": how})
    tree.run()
    parent.refresh_from_db()
    kid = child_of(parent, "sub")
    assert parent.status == status
    assert kid.status == ExecutionStatus.CANCELLED
    assert terminal_event(kid).pk < terminal_event(parent).pk
    assert Operation.objects.get(execution_id=parent.pk, name="sub").state == OperationState.CANCELLED


def test_a_parent_that_times_out_kills_its_children_first(tree, outbox):
    tree.holds.add("c0-first")
    parent = services.start("it_parent", {**PARENT, "children": 1}, timeout=0.3)
    tree.run()
    time.sleep(0.4)
    outbox["advance"].append(str(parent.pk))  # the tick's wake-up once the timeout passed
    tree.run()
    parent.refresh_from_db()
    kid = child_of(parent, "child0")
    assert (parent.status, kid.status) == (ExecutionStatus.TIMED_OUT, ExecutionStatus.CANCELLED)
    assert terminal_event(kid).pk < terminal_event(parent).pk


def test_a_child_that_times_out_is_a_failed_step_for_its_parent(tree, outbox):
    tree.holds.add("slow")
    parent = services.start("it_parent_of", {"workflow": "it_tree", "timeout": 0.3,
                                             "params": {"agent": "a1", "depth": 1, "leaf": "wait", "tag": "slow"}})
    tree.run()
    kid = child_of(parent, "child")
    assert (kid.timeout, parent.timeout) == (0.3, None)
    time.sleep(0.4)
    outbox["advance"].append(str(kid.pk))  # the tick's wake-up once its timeout passed
    tree.run()
    parent.refresh_from_db()
    kid.refresh_from_db()
    assert kid.status == ExecutionStatus.TIMED_OUT
    step = Operation.objects.get(execution_id=parent.pk, name="child")
    assert (step.state, step.error["type"]) == (OperationState.FAILED, "ChildTimedOut")
    assert parent.status == ExecutionStatus.FAILED and "ChildTimedOut" in parent.error


def test_fail_fast_kills_the_other_children_once_one_fails(tree):
    tree.holds.add("c0-first")
    tree.fails.add("c1-second")
    parent = services.start("it_parent", {**PARENT, "children": 2, "failing": [1]}, failure_mode="fail_fast")
    tree.run()
    parent.refresh_from_db()
    kid = child_of(parent, "child0")
    assert (parent.status, kid.status) == (ExecutionStatus.FAILED, ExecutionStatus.CANCELLED)
    step = Operation.objects.get(execution_id=parent.pk, name="child0")
    assert (step.state, step.error["cause"]) == (OperationState.CANCELLED, "child1")
    assert terminal_event(kid).pk < terminal_event(parent).pk


def test_a_child_cancelled_on_its_own_is_a_failed_step_for_its_parent(tree):
    tree.holds.add("c0-first")
    parent = services.start("it_parent", {**PARENT, "children": 1})
    tree.run()
    services.force_cancel(child_of(parent, "child0").pk)
    tree.run()
    parent.refresh_from_db()
    step = Operation.objects.get(execution_id=parent.pk, name="child0")
    assert (step.state, step.error["type"]) == (OperationState.FAILED, "ChildCancelled")
    assert parent.status == ExecutionStatus.FAILED


@pytest.mark.parametrize("action", ["resume", "force-resume"])
def test_resume_of_a_parent_resumes_the_same_failed_child_and_runs_nothing_twice(tree, action):
    tree.fails.add("c1-second")
    parent = services.start("it_parent", {**PARENT, "failing": [1]})
    tree.run()
    parent.refresh_from_db()
    kid = child_of(parent, "child1")
    assert (parent.status, kid.status) == (ExecutionStatus.FAILED, ExecutionStatus.FAILED)
    succeeded_at = dict(Operation.objects.filter(state=OperationState.SUCCEEDED).values_list("pk", "succeeded_at"))

    tree.fails.clear()
    services.ACTIONS[action](parent.pk)
    kid.refresh_from_db()
    assert kid.status == ExecutionStatus.STARTED
    tree.run()
    parent.refresh_from_db()
    kid.refresh_from_db()
    assert parent.status == ExecutionStatus.COMPLETED and kid.status == ExecutionStatus.COMPLETED
    assert Execution.objects.count() == 4  # the same child, resumed
    assert Operation.objects.get(execution_id=kid.pk, name="second").attempt == 2
    # What had succeeded never ran again.
    for pk, at in succeeded_at.items():
        assert Operation.objects.get(pk=pk).succeeded_at == at


def test_a_child_refused_by_its_deployment_fails_its_step_and_never_takes_the_parents(tree):
    tree.holds.add("holder")
    holder = services.start("it_tree", {"agent": "a1", "depth": 1, "leaf": "wait", "tag": "holder"}, deployment_id="d1")
    parent = services.start("it_child_left_running", {"agent": "a1", "how": "return", "deployment_id": "d1"},
                            deployment_id="d2")
    tree.run()
    step = Operation.objects.get(execution_id=parent.pk, name="sub")
    assert (step.state, step.error["type"]) == (OperationState.FAILED, "ExistingRunningExecution")
    assert not Execution.objects.filter(parent_id=parent.pk).exists()
    parent.refresh_from_db()  # it returned without looking at the step: the failure was not handled
    assert parent.status == ExecutionStatus.FAILED and "ExistingRunningExecution" in parent.error
    holder.refresh_from_db()
    assert holder.status == ExecutionStatus.STARTED

    # A child with no deployment of its own runs beside its parent's lock.
    other = services.start("it_parent", {**PARENT, "children": 1}, deployment_id="d3")
    tree.run()
    other.refresh_from_db()
    assert other.status == ExecutionStatus.COMPLETED and child_of(other, "child0").deployment_id is None


def test_a_parent_whose_childs_wake_up_was_lost_is_woken_by_the_tick(tree, outbox):
    tree.holds.add("c0-first")
    parent = services.start("it_parent", {**PARENT, "children": 1})
    tree.run()
    kid = child_of(parent, "child0")
    assert children.wake_parents_of_ended() == 0
    tree.lost.add(str(parent.pk))
    tree.finish_held()
    tree.run()
    kid.refresh_from_db()
    parent.refresh_from_db()
    assert (kid.status, parent.status) == (ExecutionStatus.COMPLETED, ExecutionStatus.STARTED)
    assert Operation.objects.get(execution_id=parent.pk, name="child0").state == OperationState.STARTED

    tree.lost.clear()
    assert children.wake_parents_of_ended() == 1
    tree.run()
    parent.refresh_from_db()
    assert parent.status == ExecutionStatus.COMPLETED
    assert parent.payload == {"children": ["c0"]}


@pytest.mark.parametrize("kind, error", [("unknown", "no workflow named 'it_nope'"), ("parameters", "colour")])
def test_a_child_of_an_unknown_workflow_or_with_bad_parameters_fails_the_parent(tree, kind, error):
    parent = services.start("it_bad_child", {"kind": kind})
    tree.run()
    parent.refresh_from_db()
    assert parent.status == ExecutionStatus.FAILED and error in parent.error
    assert not Execution.objects.filter(parent_id=parent.pk).exists()
