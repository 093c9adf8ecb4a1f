"""The kill's remote-control command (``agents.worker.control.switchyard_kill``) takes from a
broadcast only well-formed attempts — an operation id that is a UUID and a positive int — proved
by a manager for this agent, and an execution id that is a UUID, and signals only the process
groups its own worker recorded: anyone who may publish to the broker may broadcast it, and a key
once became a file name under the agent's state directory, whose content was then signalled."""

import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from agents.worker import control, local
from workflows_app import wire
from workflows_app.wire import keys

AGENT = "killer"


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    """This test's var directory, and the agent's running directory in it."""
    monkeypatch.setenv("SWITCHYARD_VAR_DIR", str(tmp_path / "var"))
    monkeypatch.setenv(local.NAME_ENV, AGENT)
    return local.running_dir()


@pytest.fixture
def processes():
    """Start sleeping processes, each the leader of a process group of its own (as a pool process
    is); all killed at the end."""
    started = []

    def start():
        process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()


@pytest.fixture
def reported(monkeypatch):
    """What the kill reports gone (a ``gone`` report to the managers, kept here instead)."""
    gone, done = [], threading.Event()

    def record(kind, attempts):
        assert kind == wire.Kind.GONE
        gone.extend(attempts)
        done.set()

    monkeypatch.setattr(control.link, "report", record)
    return gone, done


def still_running(process, for_seconds=0.5) -> bool:
    deadline = time.monotonic() + for_seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        time.sleep(0.02)
    return True


def proved(operation, attempt, purpose=keys.Purpose.KILL, agent=AGENT, key_of=AGENT):
    """An attempt as a manager's broadcast names it: ``[operation id, attempt, agent, proof]``,
    proved with the key of ``key_of``."""
    return [str(operation), attempt, agent, keys.prove(keys.derive(key_of), purpose, [str(operation), attempt])]


#: Attempts a broadcast may carry that are not an operation id and a positive attempt.
MALFORMED = [
    ["../../etc/passwd", 1],
    ["../../../decoy", 1],  # the file the test puts there names a live process group
    ["not-a-uuid", 1],  # a record of that name exists, and holds a live process group too
    [str(uuid.UUID(int=1)), "1"], [str(uuid.UUID(int=1)), 1.0], [str(uuid.UUID(int=1)), True],
    [str(uuid.UUID(int=1)), 0], [str(uuid.UUID(int=1)), -1], [str(uuid.UUID(int=1)), 2**31],
    [str(uuid.UUID(int=1)) + "/../../decoy", 1], [str(uuid.UUID(int=1))], [str(uuid.UUID(int=1)), 1, 2],
    str(uuid.UUID(int=1)), None, {"id": str(uuid.UUID(int=1)), "attempt": 1}, [None, 1], [["x"], 1], ["a" * 10**6, 1],
]


@pytest.mark.processes
def test_malformed_keys_are_ignored_and_logged_and_nothing_outside_the_records_is_signalled(
        state_dir, processes, reported, caplog):
    victim = processes()
    # What a key joined to the running directory would have reached: a file outside it, naming a
    # live process group; and a record, in it, under a name that is no attempt.
    (state_dir.parents[2] / "decoy.1").write_text(str(victim.pid))
    (state_dir / "not-a-uuid.1").write_text(str(victim.pid))

    with caplog.at_level(logging.WARNING, logger=control.__name__):
        traversal = control.switchyard_kill(None, attempts=[proved("../../../decoy", 1), proved("not-a-uuid", 1)],
                                            grace=0.1)
    assert traversal["ok"]["signalled"] == [], "no key is read as a path, nor taken unless it is an attempt"
    assert still_running(victim)
    assert "ignored 2 attempt(s) of 2, malformed or not proved" in caplog.records[-1].getMessage()
    caplog.clear()

    with caplog.at_level(logging.WARNING, logger=control.__name__):
        answer = control.switchyard_kill(None, execution_id="../../../decoy", attempts=MALFORMED, grace=0.1,
                                         dispatcher=keys.prove(keys.derive(AGENT), keys.Purpose.KILL_DISPATCHER,
                                                               "../../../decoy"))
        huge = control.switchyard_kill(None, execution_id=str(uuid.uuid4()), grace=0.1,
                                       attempts=[["../../etc/passwd", 1]] * 200_000)
        not_a_list = control.switchyard_kill(None, attempts="../../etc/passwd", grace=0.1)

    assert answer["ok"]["signalled"] == huge["ok"]["signalled"] == not_a_list["ok"]["signalled"] == []
    assert still_running(victim), "nothing signalled the process group the decoys name"
    warnings = [record.getMessage() for record in caplog.records]
    assert any(f"ignored {len(MALFORMED)} attempt(s) of {len(MALFORMED)}" in w for w in warnings), warnings
    assert any("ignored the dispatcher of execution '../../../decoy'" in w for w in warnings), warnings
    assert any("ignored 200000 attempt(s) of 200000" in w for w in warnings), warnings
    assert any("ignored attempts that are not a list" in w for w in warnings), warnings
    assert len(warnings) == 4 and max(map(len, warnings)) < 500, "once per broadcast, and short"
    assert reported[0] == []


@pytest.mark.processes
def test_good_keys_among_bad_ones_still_kill_their_recorded_process_groups(state_dir, processes, reported):
    operation, execution = uuid.uuid4(), uuid.uuid4()
    running, dispatcher, bystander = processes(), processes(), processes()
    (state_dir / local.attempt_key(operation, 3)).write_text(f"{running.pid}\n")
    (state_dir / local.dispatcher_key(execution)).write_text(str(dispatcher.pid))
    bystander_key = (uuid.uuid4(), 1)  # another execution's
    (state_dir / local.attempt_key(*bystander_key)).write_text(str(bystander.pid))

    dispatcher_proof = keys.prove(keys.derive(AGENT), keys.Purpose.KILL_DISPATCHER, str(execution).upper())
    answer = control.switchyard_kill(None, execution_id=str(execution).upper(), dispatcher=dispatcher_proof, grace=0.2,
                                     attempts=[proved(operation, 3), *MALFORMED, proved(operation, 4)])

    assert sorted(answer["ok"]["signalled"]) == sorted([local.attempt_key(operation, 3),
                                                        local.dispatcher_key(execution)])
    assert running.wait(timeout=10) == -signal.SIGTERM and dispatcher.wait(timeout=10) == -signal.SIGTERM
    gone, done = reported
    assert done.wait(timeout=10) and gone == [[str(operation), 3]]
    assert still_running(bystander)
    assert os.listdir(state_dir) == [local.attempt_key(*bystander_key)], "the killed ones' records are done with"


@pytest.mark.parametrize("grace, expected", [
    (0, 0.0), (0.5, 0.5), (30, 30.0), (86400, 86400.0),
    (None, 7.0), (float("nan"), 7.0), (float("inf"), 7.0), (-1, 7.0), (86401, 7.0), (10**400, 7.0), ("5", 7.0),
    (True, 7.0), ([1], 7.0),
])
def test_the_grace_is_a_finite_number_of_seconds_else_the_workers_own(grace, expected, settings):
    settings.WORKFLOWS = {"KILL_GRACE_SECONDS": 7}
    assert control.grace_seconds(grace) == expected


@pytest.mark.processes
def test_a_cancel_is_noted_for_the_attempts_running_here_only(state_dir, processes):
    """``switchyard_cancel``: ``ctx.is_cancelled()`` becomes true in an attempt this worker runs;
    an attempt it does not run, and a malformed one, leave nothing behind."""
    mine, elsewhere = (uuid.uuid4(), 2), (uuid.uuid4(), 1)
    running = processes()
    (state_dir / local.attempt_key(*mine)).write_text(f"{running.pid}\n")

    answer = control.switchyard_cancel(None, attempts=[proved(*mine, keys.Purpose.CANCEL),
                                                       proved(*elsewhere, keys.Purpose.CANCEL), *MALFORMED])

    assert answer["ok"]["asked"] == [local.attempt_key(*mine)]
    assert local.cancel_requested(local.attempt_key(*mine))
    assert not local.cancel_requested(local.attempt_key(*elsewhere))
    local.mark_done(local.attempt_key(*mine))
    assert not local.cancel_requested(local.attempt_key(*mine)), "done with, its note goes with it"


@pytest.mark.processes
@pytest.mark.parametrize("forged", [
    lambda op: [str(op), 1],  # no proof: what every kill carried before proofs
    lambda op: [str(op), 1, AGENT, "0" * 64],  # a guess
    lambda op: proved(op, 1, key_of="another-agent"),  # another agent's key (its own account's)
    lambda op: proved(op, 1, keys.Purpose.CANCEL),  # a manager's cancel of it, replayed as a kill
    lambda op: proved(op, 1)[:3] + [proved(op, 2)[3]],  # the proof of another attempt
], ids=["no-proof", "guess", "other-agents-key", "a-cancel", "other-attempt"])
def test_a_kill_no_manager_proved_for_this_agent_signals_nothing(state_dir, processes, reported, caplog, forged):
    """A kill broadcast by any broker client left an operation started with no process."""
    operation = uuid.uuid4()
    running = processes()
    (state_dir / local.attempt_key(operation, 1)).write_text(f"{running.pid}\n")
    with caplog.at_level(logging.WARNING, logger=control.__name__):
        answer = control.switchyard_kill(None, execution_id=str(uuid.uuid4()), attempts=[forged(operation)], grace=0.1)
    assert answer["ok"]["signalled"] == [] and still_running(running)
    assert "not proved by a manager" in caplog.text


def test_another_agents_attempts_are_passed_over_in_silence(state_dir, caplog):
    with caplog.at_level(logging.WARNING, logger=control.__name__):
        assert control.attempt_keys([proved(uuid.uuid4(), 1, agent="another-agent", key_of="another-agent")],
                                    keys.Purpose.KILL) == set()
    assert caplog.text == ""
