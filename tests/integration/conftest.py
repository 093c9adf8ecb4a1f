"""Fixtures of the integration tests: ``stack`` starts real managers and agents (harness.py)."""

import uuid

import pytest
from django.test import override_settings

from tests.integration.harness import (
    MARKERS_ENV,
    WORKFLOW_MODULES,
    Stack,
    assert_operation_events_consistent,
    ensure_broker,
)
from tests.integration.postgres import PostgresCluster


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the item (``item.rep_setup``, ``rep_call``, ...), so that a
    fixture's teardown can tell whether the test failed."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def _failed(item) -> bool:
    return any(getattr(getattr(item, f"rep_{when}", None), "failed", False) for when in ("setup", "call"))


def engine_settings(suffix) -> dict:
    """The test's own management queue and short engine timings (children and test process)."""
    return {
        "MANAGEMENT_QUEUE": f"mgmt-{suffix}",
        "AGENT_HEARTBEAT_SECONDS": 1,
        "AGENT_OFFLINE_AFTER_SECONDS": 5,
        "RETRY_INTERVAL": 0.2,
        "KILL_GRACE_SECONDS": 2,
    }


@pytest.fixture
def own_postgres(transactional_db):
    """A PostgreSQL cluster of the test's own (tests/integration/postgres.py), serving the test
    process' default connection — and so the processes of a ``stack`` requested after it — from
    a migrated database of its own, so that the test may stop and restart it."""
    cluster = PostgresCluster.create()
    try:
        with cluster.serving_django("switchyard"):
            yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def stack(request, tmp_path, transactional_db, monkeypatch):
    """Real processes for one test: ``stack.start_manager()``, ``stack.start_agent(name)``,
    waits on the database; all of them torn down afterwards, their logs printed on failure.

    The test process uses the same WORKFLOWS (its start messages go to the test's own
    management queue) and the same workflow modules as the children."""
    suffix = uuid.uuid4().hex[:8]
    workflows = engine_settings(suffix)
    markers = tmp_path / "markers"
    markers.mkdir()
    monkeypatch.setenv("SWITCHYARD_WORKFLOW_MODULES", WORKFLOW_MODULES)
    monkeypatch.setenv(MARKERS_ENV, str(markers))
    # Settings read SWITCHYARD_WORKFLOW_MODULES once, at start-up: the test process is told
    # through the setting itself, which the registry reads on every lookup.
    with override_settings(WORKFLOWS=workflows, SWITCHYARD_WORKFLOW_MODULES=[WORKFLOW_MODULES]):
        ensure_broker()
        the_stack = Stack(tmp_path, suffix=suffix, workflows=workflows, markers_dir=markers)
        try:
            yield the_stack
        finally:
            the_stack.close(failed=_failed(request.node))
        if not _failed(request.node):
            the_stack.assert_agents_used_no_database()
            assert_every_ended_execution_consistent()


def assert_every_ended_execution_consistent():
    """The invariant over every test that runs a stack (cancel first, terminate after):
    in every execution that ended, every operation that started has exactly one terminal task
    event, every operation is terminal, and no task event follows the execution's terminal event;
    and every child of an execution that ended had ended before it."""
    from workflows_app.models import Event, Execution
    from workflows_app.states import EXECUTION_TERMINAL

    ended = {}
    for execution in Execution.objects.filter(status__in=EXECUTION_TERMINAL):
        assert_operation_events_consistent(execution)
        ended[execution.pk] = (Event.objects.filter(execution_id=execution.pk, type__startswith="workflow_")
                               .exclude(type__in=["workflow_started", "workflow_resumed", "workflow_cancelling",
                                                  "workflow_retrying"]).latest("id").pk)
    for child in Execution.objects.filter(parent__isnull=False, parent_id__in=list(ended)):
        assert child.pk in ended and ended[child.pk] < ended[child.parent_id], (
            f"execution {child.parent_id} ended before its child {child.pk} ({child.status})")
