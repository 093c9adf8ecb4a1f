"""An outcome report lost after the broker took it (on Redis a manager killed as it takes a
report with BRPOP takes it with it): the agent keeps each outcome it sent with the attempt's
finished record, and sends it again when a manager's tick names the attempt, still started in the
database, a while after it ended (``agents.worker.control.switchyard_resend_outcomes``,
``agents.worker.manager.LostOutcomes``). The runner's reports reach the intake in this process
(the ``agent_link`` fixture); the integration test with a real manager and agent is
``tests/integration/test_restart.py``."""

import os
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from agents.worker import control, local, manager
from workflows_app import broker, wire
from workflows_app.models import Operation
from workflows_app.registry import operation
from workflows_app.states import OperationState
from workflows_app.wire import keys


@operation(name="test_lost_outcomes_double", max_retries=0)
def double(ctx, value):
    return value * 2


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setattr(broker, "send_advance", lambda pk, workflow_id=None: None)
    monkeypatch.setattr(broker, "send_operations", lambda ops: None)


@pytest.fixture
def lost(agent_link, monkeypatch, make_operation):
    """An attempt that ran on its agent and whose outcome report never reached the intake: the
    operation is ``started`` in the database."""
    report = agent_link.report

    def losing(kind, **fields):
        if kind == wire.Kind.OUTCOME:
            agent_link.reports.append({"kind": str(kind), **fields})  # sent, and lost on the way
            return []
        return report(kind, **fields)

    monkeypatch.setattr(agent_link, "report", losing)
    op = make_operation(OperationState.SENT, operation="test_lost_outcomes_double", args=[21], attempt=1)
    agent_link.deliver(op)
    op.refresh_from_db()
    assert op.state == OperationState.STARTED
    monkeypatch.setattr(agent_link, "report", report)  # the line works again
    return op


def asked(op):
    """What a manager's broadcast says of ``op``'s attempt: with its proof for the agent."""
    return broker.proved_attempts([(op.pk, op.attempt)], keys.Purpose.RESEND)


def ended_ago(op, seconds):
    path = local._finished_path(op.agent) / local.attempt_key(op.pk, op.attempt)
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_an_agent_sends_again_the_outcome_of_an_attempt_it_ran_when_asked(lost):
    ended_ago(lost, control.RESEND_AFTER_SECONDS + 1)
    answer = control.switchyard_resend_outcomes(None, attempts=asked(lost))
    assert answer["ok"]["resent"] == [local.attempt_key(lost.pk, lost.attempt)]
    lost.refresh_from_db()
    assert (lost.state, lost.result, lost.attempt) == (OperationState.SUCCEEDED, 42, 1)
    # Asked again, it sends it again; the second one changes nothing.
    control.switchyard_resend_outcomes(None, attempts=asked(lost))
    lost.refresh_from_db()
    assert (lost.state, lost.result) == (OperationState.SUCCEEDED, 42)


def test_an_outcome_sent_a_moment_ago_is_not_sent_again_and_nothing_else_is(lost, make_operation):
    ended_ago(lost, control.RESEND_AFTER_SECONDS - 5)  # most likely still waiting in the queue
    other = make_operation(OperationState.STARTED, operation="test_lost_outcomes_double", args=[1], attempt=1)  # never ran here
    answer = control.switchyard_resend_outcomes(None, attempts=asked(lost) + asked(other) + [
        ["../../etc/passwd", 1, lost.agent, "0" * 64], [str(lost.pk), "1", lost.agent, asked(lost)[0][3]]])
    assert answer["ok"]["resent"] == []
    lost.refresh_from_db()
    assert lost.state == OperationState.STARTED


def test_the_managers_tick_names_the_attempts_started_long_ago_a_batch_at_a_time(make_operation, monkeypatch):
    asked = []
    monkeypatch.setattr(broker, "ask_resend_outcomes", lambda attempts: asked.append(sorted(str(pk) for pk, _ in attempts)))
    monkeypatch.setattr(manager, "RESEND_BATCH", 2)
    now = timezone.now()
    old = [make_operation(OperationState.STARTED) for _ in range(3)]
    for i, op in enumerate(old):
        Operation.objects.filter(pk=op.pk).update(started_at=now - timedelta(seconds=control.RESEND_AFTER_SECONDS + 10 - i))
    make_operation(OperationState.STARTED)  # started a moment ago: its report may be on its way
    make_operation(OperationState.SUCCEEDED)

    sweep = manager.LostOutcomes()
    assert sweep(now) == 2
    assert sweep(now) is None, "not before RESEND_EVERY_SECONDS"
    sweep.due_at = 0
    assert sweep(now) == 1, "then the ones after the last named"
    sweep.due_at = 0
    assert sweep(now) == 2, "and round again"
    assert asked == [sorted(str(op.pk) for op in old[:2]), [str(old[2].pk)], sorted(str(op.pk) for op in old[:2])]
