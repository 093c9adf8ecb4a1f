"""Child executions with a real manager and real agents: a parent's children run on
the agents as executions of their own; a kill, a cancel or a resume of the parent goes down the
tree; a manager SIGKILLed while a tree runs loses nothing.

The ``stack`` fixture checks, after each test, the event-log invariant over every execution that
ended, and that no execution ended before a child of it did (cancel first, terminate after).
"""

import time

import pytest

from tests.integration.test_engine import finish, gone, up
from workflows_app import services
from workflows_app.models import Event, Execution, Operation
from workflows_app.states import EXECUTION_TERMINAL, OperationState

pytestmark = pytest.mark.integration

TERMINAL_EVENTS = ["workflow_completed", "workflow_failed", "workflow_cancelled", "workflow_timed_out"]


def descendants(execution) -> list:
    """Every execution below ``execution``, level by level."""
    found, level = [], [execution]
    while level:
        level = list(Execution.objects.filter(parent_id__in=[e.pk for e in level]).order_by("created_at"))
        found += level
    return found


def ended_at(execution) -> int:
    return Event.objects.filter(execution_id=execution.pk, type__in=TERMINAL_EVENTS).latest("id").pk


@pytest.mark.django_db(transaction=True)
def test_parents_run_children_on_two_agents_and_a_failed_child_is_caught_or_fails_its_parent(stack):
    s = up(stack)
    agents = {"agent": s.h1, "other_agent": s.h2}
    parent = services.start("it_parent", {**agents, "seconds": 0.5})
    failed = services.start("it_parent", {**agents, "children": 2, "failing": [1], "prefix": "f"})
    caught = services.start("it_parent", {**agents, "children": 2, "failing": [1], "catch": True, "prefix": "k"})

    parent = finish(stack, parent, "completed")
    assert parent.payload == {"children": ["c0", "c1", "c2"]}
    kids = descendants(parent)
    assert sorted(kid.parent_step for kid in kids) == ["child0", "child1", "child2"]
    for i in range(3):
        # Each child's two steps ran once each, on their two agents.
        assert [run["agent"] for run in stack.invocations(f"c{i}-first")] == [s.h1]
        assert [run["agent"] for run in stack.invocations(f"c{i}-second")] == [s.h2]
    assert max(kid.started_at for kid in kids) < min(kid.ended_at for kid in kids), "side by side, not one by one"

    failed = finish(stack, failed, "failed")
    assert "ChildFailed" in failed.error and "fc1-second fails for good" in failed.error
    caught = finish(stack, caught, "completed")
    assert caught.payload == {"children": ["kc0", None]}
    assert len(stack.invocations("kundo-child1")) == 1 and not stack.invocations("fundo-child1")


@pytest.mark.django_db(transaction=True)
def test_cancel_of_a_parent_cancels_every_child_before_the_parent_ends(stack):
    s = up(stack)
    parent = services.start("it_tree", {"agent": s.h1, "depth": 2, "fanout": 2, "leaf": "wait"})
    stack.wait_for(lambda: len(stack.invocations("leaf.0")) + len(stack.invocations("leaf.1")) == 2, 30,
                   "both leaves to run")
    assert services.cancel(parent.pk).status == "cancelling"
    parent = finish(stack, parent, "cancelled")
    kids = descendants(parent)
    assert len(kids) == 2 and {kid.status for kid in kids} == {"cancelled"}
    # Each leaf saw the cancel (ctx.is_cancelled()) and returned: awaited, not killed.
    assert all(len(stack.invocations(f"leaf.{i}-saw-cancel")) == 1 for i in range(2))
    assert all(ended_at(kid) < ended_at(parent) for kid in kids)


@pytest.mark.django_db(transaction=True)
def test_kill_of_a_parent_stops_every_process_of_its_grandchild(stack):
    s = up(stack, concurrency=(1, 1))
    parent = services.start("it_tree", {"agent": s.h1, "depth": 3, "leaf": "stubborn", "tag": "deep"})
    run = stack.wait_for(lambda: stack.invocations("deep.0.0"), 60, "the grandchild's step to start its sleep")[0]
    pool_process, sleep = run["pid"], run["child"]
    assert not gone(pool_process) and not gone(sleep)

    asked = time.monotonic()
    assert services.kill(parent.pk).status == "cancelled"
    grace = stack.workflows["KILL_GRACE_SECONDS"]
    stack.wait_for(lambda: gone(pool_process) and gone(sleep), grace + 1,
                   f"the grandchild's pool process {pool_process} and its sleep {sleep} to be gone")
    assert time.monotonic() - asked <= grace + 1
    tree = descendants(parent)
    assert len(tree) == 2 and {execution.status for execution in tree} == {"cancelled"}
    leaf = Operation.objects.get(execution__in=tree, name="leaf")
    assert (leaf.state, leaf.error["message"]) == ("cancelled", "killed")
    middle, bottom = tree  # level by level
    assert ended_at(bottom) < ended_at(middle) < ended_at(parent)


@pytest.mark.django_db(transaction=True)
def test_resume_of_a_parent_resumes_its_failed_child_and_runs_nothing_twice(stack, tmp_path):
    s = up(stack)
    path = tmp_path / "fixed"
    parent = services.start("it_parent_of", {"workflow": "it_resumable", "params": {"agent": s.h1, "path": str(path)}})
    parent = finish(stack, parent, "failed")
    (kid,) = descendants(parent)
    assert kid.status == "failed" and "is missing" in parent.error

    path.write_text("fixed")
    assert services.resume(parent.pk).status == "started"
    parent = finish(stack, parent, "completed")
    assert descendants(parent) == [kid]  # the same child, resumed
    kid.refresh_from_db()
    assert kid.status == "completed" and parent.payload == {"after": "after"}
    assert [len(stack.invocations(tag)) for tag in ("before", "needs", "after")] == [1, 2, 1]


@pytest.mark.django_db(transaction=True)
def test_a_manager_sigkilled_while_a_tree_runs_is_replaced_and_the_tree_completes_every_step_once(stack):
    s = up(stack)
    parent = services.start("it_parent", {"agent": s.h1, "other_agent": s.h2, "seconds": 2.0})
    stack.wait_for(lambda: all(stack.invocations(f"c{i}-first") for i in range(3)), 30, "the children's first steps")
    stack.kill(s.manager)
    stack.start_manager(concurrency=4)
    parent = finish(stack, parent, "completed", timeout=120)
    assert parent.payload == {"children": ["c0", "c1", "c2"]}
    for i in range(3):
        assert len(stack.invocations(f"c{i}-first")) == 1 and len(stack.invocations(f"c{i}-second")) == 1
    assert Execution.objects.count() == 4


@pytest.mark.django_db(transaction=True)
def test_a_tree_three_deep_and_a_fan_out_of_200_children_complete(stack):
    s = up(stack)
    deep = services.start("it_tree", {"agent": s.h1, "depth": 3, "fanout": 2, "tag": "deep"})
    wide = services.start("it_tree", {"agent": s.h2, "depth": 2, "fanout": 200, "tag": "wide"})
    assert finish(stack, deep, "completed", timeout=120).payload == {"leaves": 4}
    assert finish(stack, wide, "completed", timeout=300).payload == {"leaves": 200}
    assert len(descendants(deep)) == 6 and len(descendants(wide)) == 200
    assert Operation.objects.filter(execution__in=descendants(wide), name="leaf", state=OperationState.SUCCEEDED).count() == 200
    assert not Execution.objects.exclude(status__in=EXECUTION_TERMINAL).exists()
