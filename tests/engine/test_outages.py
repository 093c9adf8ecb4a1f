"""Riding out a database outage (workflows_app.outages): which errors are outages, how
long a caller waits, what a loop says, and what a manager does once the database is back. The
real thing — a PostgreSQL of the test's own stopped under a running stack — is
tests/integration/test_db_outage.py."""

import logging
import sqlite3
import uuid
from datetime import timedelta

import psycopg
import pytest
from django.db import InterfaceError, OperationalError
from django.test import override_settings
from django.utils import timezone

from agents.models import Agent
from agents.worker.link import claim_seconds
from agents.worker import manager
from agents.worker.lifecycle import Ticker
from workflows_app import broker, outages
from workflows_app.engine import dispatcher, tick
from workflows_app.engine.context import WorkflowContext
from workflows_app.errors import DatabaseUnavailable
from workflows_app.models import Execution, Operation
from workflows_app.states import ExecutionStatus, OperationState


def django_error(cls, cause):
    """A Django database error as Django raises it: the driver's error as its cause."""
    try:
        raise cls(str(cause)) from cause
    except cls as exc:
        return exc


REFUSED = django_error(OperationalError, psycopg.OperationalError("connection failed: Connection refused"))


@pytest.mark.parametrize("error, outage", [
    (REFUSED, True),
    (django_error(OperationalError, psycopg.errors.AdminShutdown("terminating connection due to administrator command")), True),
    (django_error(OperationalError, psycopg.errors.CannotConnectNow("the database system is starting up")), True),
    (django_error(InterfaceError, psycopg.InterfaceError("the connection is closed")), True),
    (django_error(OperationalError, psycopg.errors.DeadlockDetected("deadlock detected")), False),
    (django_error(OperationalError, psycopg.errors.QueryCanceled("canceling statement due to statement timeout")), False),
    (django_error(OperationalError, sqlite3.OperationalError("database is locked")), False),
    (ValueError("not a database error"), False),
])
def test_an_outage_is_an_unreachable_server_not_a_refused_statement(error, outage):
    assert outages.is_outage(error) is outage


def failing(times, error=REFUSED, result="done"):
    """A function that raises ``error`` ``times`` times, then returns ``result``; and its calls.
    (Outside a transaction, as a caller of ride_out is: these tests use no database.)"""
    calls = []

    def fn(*args):
        calls.append(args)
        if len(calls) <= times:
            raise error
        return result
    return fn, calls


def test_ride_out_calls_again_until_the_database_answers_and_says_so(caplog):
    fn, calls = failing(2)
    with caplog.at_level(logging.WARNING, logger="workflows_app.outages"):
        assert outages.ride_out("reporting attempt 1 of x", fn, "a") == "done"
    assert calls == [("a",)] * 3
    text = caplog.text
    assert "database unavailable while reporting attempt 1 of x" in text and "database back after" in text


def test_ride_out_raises_what_is_no_outage_at_once():
    deadlock = django_error(OperationalError, psycopg.errors.DeadlockDetected("deadlock detected"))
    fn, calls = failing(1, deadlock)
    with pytest.raises(OperationalError):
        outages.ride_out("x", fn)
    assert len(calls) == 1


def test_past_the_tolerance_ride_out_gives_up_loudly(caplog):
    fn, calls = failing(10**6)
    with override_settings(WORKFLOWS={"DATABASE_OUTAGE_TOLERANCE": 0.3}), caplog.at_level(logging.CRITICAL):
        with pytest.raises(DatabaseUnavailable) as raised:
            outages.ride_out("claiming attempt 1 of x", fn)
    assert len(calls) > 1
    assert raised.value.what == "claiming attempt 1 of x" and raised.value.seconds >= 0.3
    assert any(r.levelno == logging.CRITICAL and "gave up" in r.getMessage() for r in caplog.records)


def test_a_shorter_tolerance_gives_up_sooner():
    def tries(tolerance):
        fn, calls = failing(10**6)
        with override_settings(WORKFLOWS={"DATABASE_OUTAGE_TOLERANCE": tolerance}), pytest.raises(DatabaseUnavailable):
            outages.ride_out("x", fn)
        return len(calls)

    assert tries(0) == 1
    assert tries(1.0) > tries(0.2) > 1


def test_a_ticker_says_once_that_the_database_went_and_once_that_it_came_back(caplog):
    fn, calls = failing(3)
    ticker = Ticker(fn, 0.01, name="tick")
    with caplog.at_level(logging.WARNING):
        for _ in range(5):
            ticker.turn()
    assert len(calls) == 5
    assert not ticker.database.down
    warnings = [r.getMessage() for r in caplog.records if r.name == "workflows_app.outages"]
    assert len(warnings) == 2 and "database unavailable" in warnings[0] and "database back after" in warnings[1]
    assert not [r for r in caplog.records if r.exc_info], "an outage is no traceback"


def test_a_ticker_logs_a_bug_with_its_traceback(caplog):
    fn, _ = failing(1, ValueError("a bug"))
    with caplog.at_level(logging.ERROR):
        Ticker(fn, 0.01, name="tick").turn()
    assert any(r.exc_info and "a bug" in str(r.exc_info[1]) for r in caplog.records)


@pytest.fixture
def silent_agent(make_operation):
    """An agent last heard of two minutes ago — as every agent looks just after a long outage —
    with a started operation."""
    incarnation = uuid.uuid4().hex
    Agent.objects.create(name="h1", incarnation=incarnation, last_heartbeat=timezone.now() - timedelta(seconds=120))
    operation = make_operation(OperationState.STARTED, agent="h1", attempt=1, incarnation=incarnation,
                               started_at=timezone.now() - timedelta(seconds=600))
    return operation


def fail_one_pass(ticker, monkeypatch):
    """One pass of ``ticker`` that fails because the database is unreachable: the next one is the
    first since it came back."""
    def unreachable(now):
        raise REFUSED

    with monkeypatch.context() as patch:
        patch.setattr(tick, "run", unreachable)
        with pytest.raises(OperationalError):
            ticker()


@pytest.mark.django_db
@override_settings(WORKFLOWS={"AGENT_OFFLINE_AFTER_SECONDS": 60, "AGENT_HEARTBEAT_SECONDS": 10})
def test_after_an_outage_a_manager_judges_no_agent_offline_until_it_could_heart_beat_again(silent_agent, outbox, monkeypatch):
    ticker = manager.Tick()
    fail_one_pass(ticker, monkeypatch)
    ticker()
    assert Operation.objects.get(pk=silent_agent.pk).state == OperationState.STARTED
    manager.Tick()()  # a manager that saw no outage judges by the heartbeat alone
    assert Operation.objects.get(pk=silent_agent.pk).state == OperationState.RESCHEDULED


@pytest.mark.django_db
@override_settings(WORKFLOWS={"AGENT_OFFLINE_AFTER_SECONDS": 60, "AGENT_HEARTBEAT_SECONDS": 0})
def test_after_an_outage_an_attempt_no_worker_runs_any_more_is_lost(silent_agent, outbox, monkeypatch):
    """An agent gave up a report past the tolerance: it heart-beats again, but runs the attempt
    no more. Once the agents could beat, the manager asks them and records it lost (retryable)."""
    Agent.objects.filter(name="h1").update(last_heartbeat=timezone.now())
    monkeypatch.setattr(broker, "ask_running", lambda timeout: [{"agent": "h1", "incarnation": silent_agent.incarnation,
                                                                 "running": []}])
    ticker = manager.Tick()
    ticker()
    assert Operation.objects.get(pk=silent_agent.pk).state == OperationState.STARTED, "no outage: nothing to reconcile"
    fail_one_pass(ticker, monkeypatch)
    ticker()
    operation = Operation.objects.get(pk=silent_agent.pk)
    assert operation.state == OperationState.RESCHEDULED
    assert operation.error["type"] == "WorkerLost" and "lost during restart" in operation.error["message"]


@pytest.mark.django_db
def test_an_outage_under_workflow_code_is_no_failure_of_the_code(make_execution, monkeypatch, outbox):
    """The database goes away while the dispatcher replays the function: the pass is run again
    (ride_out), not concluded as if the code had raised."""
    execution = make_execution(workflow_id="it_outage", parameters={"agent": "h1", "prefix": "p"}, token_hash="a" * 64)

    def unreachable(*args, **kwargs):
        raise REFUSED

    monkeypatch.setattr(WorkflowContext, "graph", unreachable)
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=["tests.workflows"]), pytest.raises(OperationalError):
        dispatcher.run_pass(execution.pk)
    assert Execution.objects.get(pk=execution.pk).status == ExecutionStatus.STARTED


@pytest.mark.django_db
@override_settings(WORKFLOWS={"AGENT_OFFLINE_AFTER_SECONDS": 60, "AGENT_HEARTBEAT_SECONDS": 0})
def test_a_live_agents_attempt_claimed_within_a_claims_timeout_is_left_to_it(silent_agent, outbox, monkeypatch):
    """The agent may still wait for the answer to its claim, which a manager that died stored and
    never sent: its message comes again once the claim times out, and the agent runs it. Claimed
    longer ago than that, it is lost."""
    Agent.objects.filter(name="h1").update(last_heartbeat=timezone.now())
    Operation.objects.filter(pk=silent_agent.pk).update(started_at=timezone.now())
    monkeypatch.setattr(broker, "ask_running", lambda timeout: [{"agent": "h1", "incarnation": silent_agent.incarnation,
                                                                 "running": []}])
    started = [Operation.objects.get(pk=silent_agent.pk)]
    assert manager.reconcile_started(started, manager.ask_workers()) == 0
    assert Operation.objects.get(pk=silent_agent.pk).state == OperationState.STARTED
    Operation.objects.filter(pk=silent_agent.pk).update(started_at=timezone.now() - timedelta(seconds=claim_seconds() + 1))
    started = [Operation.objects.get(pk=silent_agent.pk)]
    assert manager.reconcile_started(started, manager.ask_workers()) == 1
    assert Operation.objects.get(pk=silent_agent.pk).state == OperationState.RESCHEDULED
