"""A delivery of an attempt whose claim is answered "already started by this run of the agent"
is one of three: a duplicate (a message sent again, or given back with a claim a dead manager
held), dropped while the earlier delivery runs in another process or once it finished here (its
outcome report may be stored after this claim's answer: reports are stored in batches); the
redelivery of one whose pool process died, reported lost; or the redelivery of one whose claim
a manager stored and died before answering, which never ran and runs now. Taking the first for
lost made a succeeded step fail with WorkerLost."""

import multiprocessing
import os
import subprocess
import sys
import threading
import time

import pytest

from agents.worker import lifecycle, link, local
from agents.worker.local import Delivery
from workflows_app import wire
from workflows_app.sdk import operation
from workflows_app.wire import keys

AGENT = "dup-agent"
OPERATION = "7d9f0f8e-2f3a-4c35-9a55-0c2d8c8f2b11"


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SWITCHYARD_VAR_DIR", str(tmp_path / "var"))
    monkeypatch.setenv(local.NAME_ENV, AGENT)


def record(pgid, attempt=1):
    """What ``local.mark_running`` writes in the pool process of process group ``pgid``."""
    (local.running_dir() / local.attempt_key(OPERATION, attempt)).write_text(f"{pgid}\n")


def test_an_attempt_that_finished_here_is_not_lost_though_its_outcome_is_not_stored_yet():
    local.mark_running(local.attempt_key(OPERATION, 1))
    local.mark_done(local.attempt_key(OPERATION, 1))
    started = time.monotonic()
    assert local.earlier_delivery(OPERATION, 1, settle_seconds=5) is Delivery.FINISHED
    assert time.monotonic() - started < 1, "a finished attempt is known at once"
    assert local.earlier_delivery(OPERATION, 2, settle_seconds=0.1) is Delivery.NEVER_RAN, "another attempt is not that one"


@pytest.mark.processes
def test_an_attempt_running_in_another_live_process_is_not_lost():
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        record(other.pid)
        assert local.earlier_delivery(OPERATION, 1) is Delivery.RUNNING
    finally:
        other.kill()
        other.wait()
    assert local.earlier_delivery(OPERATION, 1, settle_seconds=5) is Delivery.DIED, "its process group is gone"


def test_a_record_of_this_very_process_is_a_delivery_that_died_in_it():
    record(os.getpgrp())
    assert local.earlier_delivery(OPERATION, 1, settle_seconds=5) is Delivery.DIED


@pytest.mark.processes
def test_the_delivery_answered_run_at_the_same_moment_is_waited_for():
    """No record yet: the delivery that was answered "run" in the same batch of answers may not
    have written it; it is waited for, up to the settling time, and then it counts."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        threading.Timer(0.3, record, args=(other.pid,)).start()
        assert local.earlier_delivery(OPERATION, 1, settle_seconds=3) is Delivery.RUNNING
    finally:
        other.kill()
        other.wait()


def test_no_record_at_all_after_the_settling_time_is_a_claim_whose_answer_was_lost():
    started = time.monotonic()
    assert local.earlier_delivery(OPERATION, 1, settle_seconds=0.3) is Delivery.NEVER_RAN
    assert time.monotonic() - started >= 0.3


@pytest.mark.processes
def test_a_claim_another_live_process_of_this_run_still_holds_is_left_to_it_at_once():
    """The answer names the process whose claim started the attempt: while that process still
    claims it (its own claim, sent again, is answered the same and it runs the attempt), this
    delivery is a duplicate — without waiting for a record."""
    claimant = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (local._claiming_path() / f"{local.attempt_key(OPERATION, 1)}@{claimant.pid}").parent.mkdir(parents=True)
        (local._claiming_path() / f"{local.attempt_key(OPERATION, 1)}@{claimant.pid}").touch()
        started = time.monotonic()
        assert local.earlier_delivery(OPERATION, 1, claimed_by=claimant.pid, settle_seconds=5) is Delivery.RUNNING
        assert time.monotonic() - started < 1
    finally:
        claimant.kill()
        claimant.wait()
    # Its process gone (or done claiming, without a record of running it): nothing ran it.
    assert local.earlier_delivery(OPERATION, 1, claimed_by=claimant.pid, settle_seconds=5) is Delivery.NEVER_RAN


def test_this_process_own_claim_whose_answer_was_lost_runs_at_once():
    local.mark_claiming(local.attempt_key(OPERATION, 1))
    started = time.monotonic()
    assert local.earlier_delivery(OPERATION, 1, claimed_by=os.getpid(), settle_seconds=5) is Delivery.NEVER_RAN
    assert time.monotonic() - started < 1
    local.clear_claiming(local.attempt_key(OPERATION, 1))
    assert not list(local._claiming_path().iterdir())


class LostAnswers:
    """The managers' line as two deliveries of one attempt in one run of the agent met it in a
    soak: the claim of the first was stored and its answer lost, and both claims (the first sent
    again) are answered, at the same moment, that the first one's claim started the attempt."""

    def __init__(self, claimant, at):
        self.claimant, self.at = claimant, at

    def claim(self, operation_id, attempt, timeout):
        time.sleep(max(0.0, self.at - time.time()))
        return {"verdict": wire.Verdict.STARTED, "incarnation": local.incarnation(), "pid": self.claimant.value,
                "operation": "dup_record", "execution": "4c3d2b1a-0000-4000-8000-000000000001", "step": "s",
                "args": [], "kwargs": {}, "dry_run": False, "retries_left": 0}

    def report(self, kind, **fields):
        pass


@operation(name="dup_record")
def dup_record(ctx):
    with open(os.environ["DUP_RUNS"], "a") as runs:
        runs.write(f"{os.getpid()}\n")


def _deliver(line, first):
    from agents import runner

    os.setpgid(0, 0)  # as each pool process does (agents.worker.pool): its own process group
    if first:
        line.claimant.value = os.getpid()
    else:
        while not line.claimant.value:
            time.sleep(0.01)
    with link.through(line):
        runner.run_operation(OPERATION, 1, proof=keys.prove(link.own_key(), keys.Purpose.OPERATION, [OPERATION, 1]))


@pytest.mark.processes
def test_two_deliveries_answered_together_that_one_of_them_started_the_attempt_run_it_once(tmp_path, monkeypatch):
    """Two pool processes of one run, each with a delivery of the same attempt, both answered
    "started by this run" at once: the one whose claim started it runs it; the other drops its
    delivery. (Each used to wait for a record of the other, find none, and run it: twice.)"""
    monkeypatch.setenv(local.INCARNATION_ENV, "18ee0000aaaabbbb.0123456789abcde")
    monkeypatch.setenv("DUP_RUNS", str(tmp_path / "runs"))
    fork = multiprocessing.get_context("fork")
    line = LostAnswers(fork.Value("i", 0), time.time() + 1.0)
    deliveries = [fork.Process(target=_deliver, args=(line, first)) for first in (True, False)]
    for delivery in deliveries:
        delivery.start()
    for delivery in deliveries:
        delivery.join(30)
    assert [d.exitcode for d in deliveries] == [0, 0]
    assert (tmp_path / "runs").read_text().split() == [str(line.claimant.value)], "run once, by its claimant"


def test_finished_attempts_are_forgotten_after_a_while_and_at_the_next_run():
    for attempt in (1, 2):
        local.mark_done(local.attempt_key(OPERATION, attempt))
    old = time.time() - local.FINISHED_KEEP_SECONDS - 10
    finished = local._finished_path() / local.attempt_key(OPERATION, 1)
    os.utime(finished, (old, old))
    local.forget_finished(AGENT)
    assert not finished.exists()
    assert local.earlier_delivery(OPERATION, 2, settle_seconds=0) is Delivery.FINISHED, "a recent one is kept"
    local.kill_leftovers(AGENT)
    assert local.earlier_delivery(OPERATION, 2, settle_seconds=0) is Delivery.NEVER_RAN, "a new run starts with none"


def test_the_heartbeat_forgets_finished_attempts_once_a_while_not_at_every_beat(monkeypatch):
    """Forgetting looks at every finished record (a busy agent keeps an hour of them): a beat
    every AGENT_HEARTBEAT_SECONDS does it once every FORGET_EVERY_SECONDS."""
    beats = []

    class Line:
        def report(self, kind, **fields):
            beats.append(kind)

    def finished_long_ago(attempt):
        local.mark_done(local.attempt_key(OPERATION, attempt))
        path = local._finished_path() / local.attempt_key(OPERATION, attempt)
        old = time.time() - local.FINISHED_KEEP_SECONDS - 10
        os.utime(path, (old, old))
        return path

    monkeypatch.setattr(lifecycle, "FORGET_EVERY_SECONDS", 0.5)
    beat = lifecycle.heartbeat(AGENT).fn
    with link.through(Line()):
        first = finished_long_ago(1)
        beat()
        assert not first.exists()
        second = finished_long_ago(2)
        beat()
        assert second.exists(), "forgotten at the next beat"
        time.sleep(0.6)
        beat()
        assert not second.exists(), "not forgotten FORGET_EVERY_SECONDS later"
    assert beats == [wire.Kind.HEARTBEAT] * 3, "every beat reports"


def test_a_dispatcher_pass_leaves_no_record_behind():
    key = local.dispatcher_key("0b7e4d55-5a0e-4f0b-8f4e-8b0d7f1c2a33")
    local.mark_running(key)
    local.mark_done(key)
    assert not local._finished_path().exists() or not list(local._finished_path().iterdir())
