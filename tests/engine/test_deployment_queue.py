"""One active execution per ``deployment_id``: a second is refused, queued or forced;
a queued one starts, in order, when the deployment is free. On the database alone: the
messages go out on commit, which these tests capture without sending."""

import pytest

from workflows_app import services
from workflows_app.engine import deployments
from workflows_app.errors import ExistingRunningExecution
from workflows_app.models import Execution
from workflows_app.states import ExecutionStatus
from workflows_app.transitions import execution_transition


def advances(callbacks):
    """The start messages among captured on-commit callbacks (``broker.send_advance_on_commit``'s)."""
    return [cb for cb in callbacks if cb.__qualname__.startswith("send_advance_on_commit.")]


def status(execution):
    return Execution.objects.get(pk=execution.pk).status


@pytest.fixture
def first(db, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks():
        return services.start("demo", deployment_id="site-1")


def test_a_second_execution_of_a_busy_deployment_is_refused_and_nothing_is_stored(first, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as sent, pytest.raises(ExistingRunningExecution) as refused:
        services.start("demo", deployment_id="site-1")
    assert str(first.pk) in str(refused.value) and "site-1" in str(refused.value)
    assert Execution.objects.count() == 1 and sent == []


def test_queued_executions_start_in_order_when_the_deployment_is_free(first, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as sent:
        second = services.start("demo", deployment_id="site-1", queue=True)
        third = services.start("demo", deployment_id="site-1", queue=True)
    assert (status(second), status(third)) == ("queued", "queued") and advances(sent) == [], "queued ones are not sent"

    with django_capture_on_commit_callbacks():
        assert deployments.start_next_queued("site-1") is None, "the first still holds the deployment"
        execution_transition(Execution.objects.get(pk=first.pk), ExecutionStatus.CANCELLED)
        started = deployments.start_next_queued("site-1")
    assert started.pk == second.pk and status(second) == "pending" and status(third) == "queued"
    with django_capture_on_commit_callbacks():
        assert deployments.start_next_queued("site-1") is None, "the second holds it now"


def test_force_runs_beside_the_active_execution_and_other_deployments_are_free(first, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as sent:
        forced = services.start("demo", deployment_id="site-1", force=True)
        other = services.start("demo", deployment_id="site-2")
        free = services.start("demo")
    assert {status(forced), status(other), status(free)} == {"pending"} and len(advances(sent)) == 3
