"""A manager's pass of the tick (``engine.tick.run``) runs each of its parts whatever another one
raised: the error is logged with the part's name (its traceback once, until the part works
again) and the pass goes on. Only an unreachable database ends it, for the manager's tick to ride
out. The test harness' own pass (``run_deadlines``) still raises what a part raised."""

import logging

import pytest
from django.utils import timezone

from workflows_app import outages
from workflows_app.engine import progress, recovery, schedules, starts, tick
from workflows_app.flow import gate

#: The parts of a pass, in order, and where each one is.
PARTS = [
    ("send_due_retries", progress, "send_due_retries"),
    ("flow.drain_waiting", gate, "drain_waiting"),
    ("fail_timed_out_operations", tick, "fail_timed_out_operations"),
    ("wake_due_executions", tick, "wake_due_executions"),
    ("starts.send_due", starts, "send_due"),
    ("schedules.fire_due", schedules, "fire_due"),
    ("resend_stuck_messages", tick, "resend_stuck_messages"),
    ("broker_watch", recovery.broker_watch, "check"),
]


class Outage(Exception):
    """Stands for an unreachable database (``outages.is_outage``)."""


@pytest.fixture
def parts(monkeypatch):
    """Every part of the pass replaced by a recorder (nothing reaches a database or a broker);
    ``parts.fail(name, exc)`` makes that part raise. ``parts.ran``: the parts run, in order."""
    ran = []
    failing = {}

    def recorder(name):
        def part(*args, **kwargs):
            ran.append(name)
            if name in failing:
                raise failing[name]
        return part

    for name, where, attribute in PARTS:
        monkeypatch.setattr(where, attribute, recorder(name))
    monkeypatch.setattr(tick, "_last_sweep", None)  # the sweep is due
    monkeypatch.setattr(outages, "is_outage", lambda exc: isinstance(exc, Outage))
    tick._failing_parts.clear()  # none failing before (the set itself, not a stand-in)
    yield type("Parts", (), {"ran": ran, "fail": staticmethod(failing.__setitem__),
                             "mend": staticmethod(lambda name: failing.pop(name))})
    tick._failing_parts.clear()


def errors(caplog):
    return [record for record in caplog.records if record.name == tick.logger.name and record.levelno >= logging.ERROR]


@pytest.mark.parametrize("failing", [name for name, _, _ in PARTS])
def test_a_part_that_raises_is_logged_and_every_other_part_still_runs(parts, failing, caplog):
    parts.fail(failing, RuntimeError("refused: PRECONDITION_FAILED"))
    with caplog.at_level(logging.DEBUG, logger=tick.logger.name):
        tick.run(timezone.now())
    assert parts.ran == [name for name, _, _ in PARTS]
    (logged,) = errors(caplog)
    assert logged.getMessage() == f"tick: {failing} failed: RuntimeError: refused: PRECONDITION_FAILED (the pass goes on)"
    assert logged.exc_info is not None, "its traceback, the first time"


def test_a_part_that_keeps_failing_logs_one_line_a_pass_until_it_works_again(parts, caplog):
    parts.fail("wake_due_executions", RuntimeError("boom"))
    tick.run(timezone.now())
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger=tick.logger.name):
        tick.run(timezone.now())
    (again,) = errors(caplog)
    assert again.getMessage() == "tick: wake_due_executions failed again: RuntimeError: boom"
    assert again.exc_info is None
    assert [r for r in caplog.records if r.levelno == logging.DEBUG and r.exc_info], "the traceback at DEBUG"
    parts.mend("wake_due_executions")
    caplog.clear()
    tick.run(timezone.now())
    assert [r.getMessage() for r in caplog.records if r.name == tick.logger.name] == ["tick: wake_due_executions works again"]
    parts.fail("wake_due_executions", RuntimeError("boom"))
    caplog.clear()
    tick.run(timezone.now())
    assert errors(caplog)[0].exc_info is not None, "a new run of failures shows its traceback again"


def test_an_unreachable_database_ends_the_pass_for_the_managers_tick_to_ride_out(parts):
    parts.fail("fail_timed_out_operations", Outage("connection refused"))
    with pytest.raises(Outage):
        tick.run(timezone.now())
    assert parts.ran == ["send_due_retries", "flow.drain_waiting", "fail_timed_out_operations"]


def test_the_harness_pass_raises_what_a_part_raised(parts):
    parts.fail("send_due_retries", RuntimeError("a bug the test must see"))
    with pytest.raises(RuntimeError, match="a bug the test must see"):
        tick.run_deadlines(timezone.now())
    assert parts.ran == ["send_due_retries"]
