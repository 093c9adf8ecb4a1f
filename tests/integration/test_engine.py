"""The engine end to end: a real manager and two real agents (``run_manager``, ``run_agent``)
on the test's database and broker, running the workflows of ``tests/workflows.py``.

Operations count their real invocations in marker files (``stack.invocations(tag)``), so each
test checks what ran independently of what the engine recorded; and every test ends with the
event-log invariant (``assert_operation_events_consistent``).
"""

import sys

import psutil
import pytest
from celery.backends.base import DisabledBackend
from django.conf import settings

from tests import workflows as wf
from tests.integration.harness import assert_operation_events_consistent, describe_execution
from workflows_app import services, signing
from workflows_app.models import Event, Operation
from workflows_app.models.operation import task_id_for
from workflows_app.states import EXECUTION_TERMINAL, FailureMode
from workflows_app.wire import keys

try:
    from workflows_app.broker import RUNNER_TASK
except ImportError:  # the engine's name for the operation runner task (agents/runner.py)
    RUNNER_TASK = "agents.run_operation"

pytestmark = pytest.mark.integration

TERMINAL = [status.value for status in EXECUTION_TERMINAL]
TIMEOUT = 60


# --- helpers ------------------------------------------------------------------------------

class Up:
    """What ``up()`` started: the manager and two agents (``h1``, ``h2``)."""

    def __init__(self, stack, manager, agents):
        self.stack, self.manager, self.agents = stack, manager, agents
        self.h1, self.h2 = list(agents)


def up(stack, concurrency=(2, 2)) -> Up:
    """A manager and two agents, ``host-1`` and ``host-2`` (with the test's suffix), ready."""
    manager = stack.start_manager(concurrency=4)
    names = [stack.agent_name("host-1"), stack.agent_name("host-2")]
    agents = {name: stack.start_agent(name, concurrency=c) for name, c in zip(names, concurrency)}
    for name in names:
        stack.wait_for_agent(name)
    return Up(stack, manager, agents)


def finish(stack, execution, status, timeout=TIMEOUT):
    """Wait for the execution to end; it must have ended ``status``."""
    done = stack.wait_for_status(execution.pk, TERMINAL, timeout=timeout)
    assert done.status == status, describe_execution(execution.pk)
    return done


def operations(execution) -> dict:
    return {op.name: op for op in Operation.objects.filter(execution_id=execution.pk)}


def states(execution) -> dict:
    return {name: op.state for name, op in operations(execution).items()}


def events(execution, type, operation=None):
    found = Event.objects.filter(execution_id=execution.pk, type=type).order_by("id")
    return list(found.filter(operation=operation) if operation is not None else found)


def event_ids(execution, type) -> dict:
    """Step name -> ids of its events of ``type``."""
    ids = {}
    for name, pk in Event.objects.filter(execution_id=execution.pk, type=type).values_list("operation", "id"):
        ids.setdefault(name, []).append(pk)
    return ids


def stored_results(task_ids=None) -> set:
    """Keys of the Celery result backend (Redis): those of ``task_ids``, or all of them. None
    with no result backend at all (a RabbitMQ broker: settings.py configures none), where
    nothing can be stored."""
    from switchyard.celery import app

    backend = app.backend
    if isinstance(backend, DisabledBackend):
        return set()
    if task_ids is None:
        return set(backend.client.keys(backend.task_keyprefix + b"*"))
    return {key for key in map(backend.get_key_for_task, task_ids) if backend.client.exists(key)}


def gone(pid) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# --- Cromwell's worked example ------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("mode", [FailureMode.NO_NEW_CALLS, FailureMode.CONTINUE_WHILE_POSSIBLE, FailureMode.FAIL_FAST])
def test_cromwell_worked_example(stack, mode):
    """A and B independent, A1 after A, B1 after B; B fails for good while A runs."""
    # In fail_fast A is cancelled at once, and the code sees B's failure once A's processes are
    # gone (at most KILL_GRACE_SECONDS + 1 s): A runs long enough to tell that from waiting for it.
    a_seconds = 8.0 if mode == FailureMode.FAIL_FAST else 3.0
    s = up(stack)
    execution = services.start("it_cromwell", {"agent_a": s.h1, "agent_b": s.h2, "a_seconds": a_seconds},
                               failure_mode=mode.value, wait_after_fail=30)
    done = finish(stack, execution, "failed")
    ops = operations(execution)
    ran = {tag: len(stack.invocations(tag)) for tag in ("A", "B", "A1", "B1")}

    # The scenario itself: B failed while A was running.
    a_started = events(execution, "task_started", "A")[0].id
    b_failed = events(execution, "task_failed", "B")[0].id
    a_ended = [e.id for e in Event.objects.filter(execution_id=execution.pk, operation="A",
                                                  type__in=["task_succeeded", "task_cancelled", "task_failed"])]
    assert a_started < b_failed < min(a_ended), describe_execution(execution.pk)

    assert ops["B"].state == "failed" and ran["B"] == 1
    assert ops["B"].error["type"] == "NonRecoverableError"
    assert ops["B1"].state == "cancelled" and ran["B1"] == 0, "B1 depends on the failed B: it never starts"
    if mode == FailureMode.NO_NEW_CALLS:
        assert (ops["A"].state, ran["A"]) == ("succeeded", 1), "A runs to its end"
        assert (ops["A1"].state, ran["A1"]) == ("cancelled", 0), "no new call after the failure"
        assert ops["A"].succeeded_at <= done.ended_at
    elif mode == FailureMode.CONTINUE_WHILE_POSSIBLE:
        assert (ops["A"].state, ran["A"]) == ("succeeded", 1)
        assert (ops["A1"].state, ran["A1"]) == ("succeeded", 1), "A1 does not depend on B: it runs"
        assert events(execution, "task_started", "A1")[0].id > b_failed
    else:
        assert ops["A"].state == "cancelled" and ran["A"] == 1, "A was running: cancelled at once"
        assert (ops["A1"].state, ran["A1"]) == ("cancelled", 0)
        assert (done.ended_at - ops["A"].started_at).total_seconds() < a_seconds, \
            "fail_fast does not wait for the running A"
    assert "B" in done.error
    assert_operation_events_consistent(execution)


# --- Celery canvas --------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("case", wf.CANVAS_CASES)
def test_canvas(stack, case):
    s = up(stack)
    agents = [s.h1, s.h2]
    expected = wf.canvas_expectation(case, agents, stack.management_queue)
    execution = services.start("it_canvas", {"case": case, "agents": agents, "management_queue": stack.management_queue})
    done = finish(stack, execution, "completed")
    assert done.payload == {"result": expected}
    ops = operations(execution)
    assert {op.state for op in ops.values()} == {"succeeded"}, describe_execution(execution.pk)
    results = {name: op.result for name, op in ops.items()}

    if case == "chain":
        assert results == {"0:it_add": 3, "1:it_add": 13}
        assert list(ops["1:it_add"].depends_on.values_list("name", flat=True)) == ["0:it_add"]
    elif case == "immutable":
        # .si() does not receive the previous result; the step after it does.
        assert results == {"0:it_add": 3, "1:it_add": 10, "2:it_add": 110}
    elif case == "group":
        assert sorted(results.values()) == [2, 4, 6, 8] and len(ops) == 4
        assert all(not op.depends_on.exists() for op in ops.values())
    elif case == "chord":
        body = [op for op in ops.values() if op.operation == "it_collect"]
        header = sorted((op for op in ops.values() if op.operation == "it_slow_add"), key=lambda op: op.args[:2])
        assert len(body) == 1 and len(header) == 3
        assert body[0].result == [2, 4, 6], "the body gets the header's results in header order"
        assert header[0].succeeded_at > header[2].succeeded_at, "the header ended in reverse order"
        assert [op.agent for op in header] == [s.h1, s.h2, stack.management_queue]
        assert sorted(body[0].depends_on.values_list("name", flat=True)) == sorted(op.name for op in header)
    elif case == "nested":
        assert results == {"0:it_add": 3, "1.0:it_add": 13, "1.1:it_mul": 30, "2:it_xsum": 43}
        assert sorted(ops["2:it_xsum"].depends_on.values_list("name", flat=True)) == ["1.0:it_add", "1.1:it_mul"]
    elif case == "deep":
        assert len(ops) == 5 and sorted(results.values()) == [2, 3, 4, 5, 8]
    elif case == "routing":
        by_tag = {op.args[0]: op for op in ops.values()}
        assert {tag: op.agent for tag, op in by_tag.items()} == {
            "r-h1": s.h1, "r-h2": s.h2, "r-mgmt": stack.management_queue}
        for tag, op in by_tag.items():
            runs = stack.invocations(tag)
            assert [run["agent"] for run in runs] == [op.agent], f"{tag} ran where its queue says"
            started = events(execution, "task_started", op.name)
            assert len(started) == 1
            if "agent" in started[0].data:
                assert started[0].data["agent"] == op.agent
    assert_operation_events_consistent(execution)


# --- scale ----------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_fan_out_of_200_then_fan_in(stack):
    n = 200
    s = up(stack, concurrency=(4, 4))
    execution = services.start("it_fan_out", {"n": n, "agents": [s.h1, s.h2]})
    done = finish(stack, execution, "completed", timeout=120)
    assert done.payload == {"count": n, "sum": sum(2 * i for i in range(n))}
    ops = operations(execution)
    assert len(ops) == n + 1
    assert {op.state for op in ops.values()} == {"succeeded"}
    assert {op.agent for name, op in ops.items() if name != "fan-in"} == {s.h1, s.h2}
    succeeded = event_ids(execution, "task_succeeded")
    started = event_ids(execution, "task_started")
    assert all(len(ids) == 1 for ids in succeeded.values()) and len(succeeded) == n + 1
    assert min(started["fan-in"]) > max(max(ids) for name, ids in succeeded.items() if name != "fan-in"), \
        "the fan-in starts only after every member succeeded"
    assert_operation_events_consistent(execution)


@pytest.mark.django_db(transaction=True)
def test_chain_of_50_runs_in_order(stack):
    n = 50
    s = up(stack)
    results_before = stored_results()
    execution = services.start("it_chain", {"n": n, "agents": [s.h1, s.h2]})
    done = finish(stack, execution, "completed", timeout=120)
    assert done.payload == {"count": n, "last": n}
    ops = operations(execution)
    assert {op.state for op in ops.values()} == {"succeeded"} and len(ops) == n
    succeeded = event_ids(execution, "task_succeeded")
    started = event_ids(execution, "task_started")
    sending = event_ids(execution, "task_sending")
    for i in range(n - 1):
        this, following = f"c{i:02d}", f"c{i + 1:02d}"
        assert max(succeeded[this]) < min(sending[following]) < min(started[following]), \
            f"{following} was sent or started before {this} succeeded"
    # Results live in the database: neither an operation's message nor the manager's advances
    # leave one in the result backend (Celery's send_task stores them unless told not to). Keys
    # only appear: one an earlier run left on this Redis database may expire meanwhile
    # (CELERY_RESULT_EXPIRES: an hour), which is no result of this execution's.
    task_ids = [task_id_for(op.pk, op.attempt) for op in ops.values()]
    assert stored_results(task_ids) == set() and stored_results() - results_before == set()
    assert_operation_events_consistent(execution)


# --- retries --------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_retry_rules(stack):
    """RecoverableError is retried; NonRecoverableError never; another exception only when the
    operation declares it in ``retry_for`` (continue_while_possible: one failure stops nothing)."""
    s = up(stack)
    execution = services.start("it_retries", {"agent": s.h1}, failure_mode=FailureMode.CONTINUE_WHILE_POSSIBLE.value)
    finish(stack, execution, "failed")
    ops = operations(execution)
    ran = {name: len(stack.invocations(name)) for name in ops}
    rescheduled = {name: len(events(execution, "task_rescheduled", name)) for name in ops}

    assert (ops["flaky"].state, ran["flaky"], rescheduled["flaky"]) == ("succeeded", 3, 2)
    assert ops["flaky"].result == 3 and ops["flaky"].attempt == 3
    assert (ops["nonrecoverable"].state, ran["nonrecoverable"], rescheduled["nonrecoverable"]) == ("failed", 1, 0)
    # Both raise ValueError with max_retries=2: only the one with retry_for is retried.
    assert (ops["retry_for"].state, ran["retry_for"], rescheduled["retry_for"]) == ("failed", 3, 2)
    assert (ops["plain"].state, ran["plain"], rescheduled["plain"]) == ("failed", 1, 0)
    assert ops["plain"].error["type"] == ops["retry_for"].error["type"] == "ValueError"
    assert_operation_events_consistent(execution)


# --- lost work --------------------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_agent_killed_mid_operation_is_retried_after_it_starts_again(stack):
    s = up(stack)
    # Attempt 1 runs a command (a child process) for a minute: far longer than the test.
    execution = services.start("it_single", {"agent": s.h1, "tag": "long", "seconds": 60.0, "spawn": True})
    stack.wait_for_operation(execution.pk, "long", "started")
    first = stack.wait_for(lambda: stack.invocations("long"), 30, "the operation to run")[0]
    assert first["child"] and not gone(first["child"])

    stack.kill(s.agents[s.h1])
    stack.start_agent(s.h1)

    done = finish(stack, execution, "completed")
    op = Operation.objects.get(execution_id=execution.pk, name="long")
    assert (op.state, op.attempt) == ("succeeded", 2)
    runs = stack.invocations("long")
    assert len(runs) == 2 and runs[1]["agent"] == s.h1
    assert done.payload == {"result": "long"}
    lost = events(execution, "task_rescheduled", "long")
    assert [e.data.get("attempt") for e in lost] == [1], "attempt 1 was lost: a retryable failure"
    # The agent that starts again kills the operation process groups its earlier run left on
    # this host: the command attempt 1 started is gone long before its minute is up.
    stack.wait_for(lambda: gone(first["child"]), 30, f"the command {first['child']} of attempt 1 to be killed")
    assert_operation_events_consistent(execution)


#: Takes one message from a queue and holds it unacknowledged until it is SIGKILLed: what an
#: agent's parent process does when it dies between taking an operation's message from its queue
#: and starting it in a pool process.
TAKE_AND_HOLD = """
import sys, time
from kombu import Connection, Exchange, Queue
url, name, flag = sys.argv[1:]
with Connection(url) as connection:
    queue = Queue(name, Exchange(name, "direct"), routing_key=name)(connection.default_channel)
    while (message := queue.get(no_ack=False)) is None:
        time.sleep(0.05)
    open(flag, "w").write(message.headers["id"])
    time.sleep(3600)
"""


@pytest.mark.django_db(transaction=True)
def test_a_message_its_agent_died_holding_runs_once_the_agent_starts_again(stack, tmp_path):
    """On Redis, a message taken and never acknowledged is given back only after the visibility
    timeout (an hour): the agent that starts again puts the messages its queue's dead consumer
    held back in its queue, and the operation runs once (RabbitMQ gives them back itself)."""
    s = up(stack)
    stack.stop(s.agents[s.h1])
    execution = services.start("it_single", {"agent": s.h1, "tag": "held", "seconds": 0.0})
    stack.wait_for_operation(execution.pk, "long", "sent")
    flag = tmp_path / "taken"
    holder = stack.start("holder", [sys.executable, "-c", TAKE_AND_HOLD, settings.CELERY_BROKER_URL, s.h1, str(flag)])
    stack.wait_for(lambda: flag.exists() and flag.read_text(), 30, "the operation's message to be taken")
    stack.kill(holder)
    op = operations(execution)["long"]
    assert flag.read_text() == task_id_for(op.pk, 1) and op.state == "sent"

    stack.start_agent(s.h1)
    finish(stack, execution, "completed", timeout=60)
    assert len(stack.invocations("held")) == 1
    assert operations(execution)["long"].attempt == 1
    assert_operation_events_consistent(execution)


@pytest.mark.django_db(transaction=True)
def test_a_revoked_fan_in_member_does_not_hang_the_execution(stack):
    """host-1 runs one operation at a time, so the other members wait in its queue: one of them
    is revoked there (Celery's revoke, by task id). The fan-in must still end."""
    from switchyard.celery import app

    s = up(stack, concurrency=(1, 2))
    execution = services.start("it_fan_in", {"agent": s.h1, "join_agent": s.h2, "members": 3, "seconds": 2.0})

    def queued_member():
        members = list(Operation.objects.filter(execution_id=execution.pk, name__startswith="m"))
        running = [op for op in members if op.state == "started"]
        waiting = [op for op in members if op.state == "sent"]
        return waiting[-1] if running and waiting else None

    victim = stack.wait_for(queued_member, 30, "one member running and another queued",
                            lambda: describe_execution(execution.pk))
    app.control.revoke(victim.task_id)

    done = stack.wait_for_status(execution.pk, TERMINAL, timeout=TIMEOUT)
    ops = operations(execution)
    assert all(op.is_terminal for op in ops.values()), describe_execution(execution.pk)
    assert all(run.get("attempt") != victim.attempt for run in stack.invocations(victim.name)), \
        "the revoked attempt never ran"
    if done.status == "completed":
        assert ops[victim.name].attempt > victim.attempt
        assert len(stack.invocations("join")) == 1
    assert_operation_events_consistent(execution)


@pytest.mark.django_db(transaction=True)
def test_a_lost_fan_in_member_is_retried_and_the_fan_in_completes(stack):
    s = up(stack)
    # Both members run at once on host-1 (concurrency 2), each for far longer than the test.
    execution = services.start("it_fan_in", {"agent": s.h1, "join_agent": s.h2, "members": 2, "seconds": 60.0})

    def running_members():
        started = [name for name, state in states(execution).items() if name.startswith("m") and state == "started"]
        return started if len(started) == 2 and all(stack.invocations(name) for name in started) else None

    lost = stack.wait_for(running_members, 30, "two members running", lambda: describe_execution(execution.pk))
    stack.kill(s.agents[s.h1])
    stack.start_agent(s.h1)

    finish(stack, execution, "completed")
    ops = operations(execution)
    assert {op.state for op in ops.values()} == {"succeeded"}
    for name in lost:
        assert ops[name].attempt == 2 and len(stack.invocations(name)) == 2, name
    assert len(stack.invocations("join")) == 1
    assert_operation_events_consistent(execution)


# --- duplicate delivery -------------------------------------------------------------------

@pytest.mark.django_db(transaction=True)
def test_a_message_delivered_twice_runs_the_operation_once(stack):
    from switchyard.celery import app

    s = up(stack)
    execution = services.start("it_duplicate", {"agent": s.h1, "hold_agent": s.h2, "hold_seconds": 4.0})
    op = stack.wait_for_operation(execution.pk, "once", "succeeded")
    succeeded = events(execution, "task_succeeded", "once")[0]
    assert len(stack.invocations("once")) == 1

    # The same attempt's message again, as Redis' visibility timeout or a requeue would deliver it.
    app.send_task(RUNNER_TASK, args=[str(op.id), op.attempt], task_id=op.task_id, queue=op.agent,
                  kwargs={"proof": keys.prove(signing.agent_key(op.agent), keys.Purpose.OPERATION,
                                              [str(op.id), op.attempt])})

    def recorded():
        return Event.objects.filter(execution_id=execution.pk, operation="once", id__gt=succeeded.id,
                                    type__in=["log", "stale_report"]).first()

    note = stack.wait_for(recorded, 30, "the agent to record the duplicate delivery",
                          lambda: describe_execution(execution.pk))
    assert note.type in ("log", "stale_report")
    finish(stack, execution, "completed")
    op.refresh_from_db()
    assert (op.state, op.attempt, op.result) == ("succeeded", 1, "once")
    assert len(stack.invocations("once")) == 1, "the duplicate did not run the operation again"
    assert len(events(execution, "task_started", "once")) == 1
    assert_operation_events_consistent(execution)
