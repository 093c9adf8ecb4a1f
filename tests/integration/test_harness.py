"""The integration harness itself, with trivial children (``manage.py shell -c ...``): it needs
no engine. Children see the test's database and settings; a child that dies shows its log; no
process of a stack, nor anything it started, outlives the teardown."""

import io
import json
import signal
import sys
import textwrap
import time

import psutil
import pytest

from tests.integration.harness import assert_operation_events_consistent, describe_execution
from workflows_app.models import Event, Execution, Operation
from workflows_app.states import EventType, ExecutionStatus, OperationState

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def shell(code):
    return ["manage.py", "shell", "-c", textwrap.dedent(code)]


SLEEPER = shell("""
    import time
    print("sleeper up", flush=True)
    time.sleep(60)
""")

# Starts a grandchild in a session (and process group) of its own, as an agent's pool process
# or an operation's subprocess does, then sleeps: a SIGKILL to the child's group misses it.
SPAWNER = shell("""
    import subprocess, sys, time
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    print("grandchild", child.pid, flush=True)
    time.sleep(60)
""")


def wait_for_line(proc, text, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(line.startswith(text) for line in proc.log_text().splitlines()):
            return
        assert proc.alive(), f"{proc.describe()} before printing {text!r}:\n{proc.log_text()}"
        time.sleep(0.1)
    raise AssertionError(f"{proc.name} did not print {text!r}:\n{proc.log_text()}")


def grandchild_pid(proc):
    wait_for_line(proc, "grandchild ")
    line = next(line for line in proc.log_text().splitlines() if line.startswith("grandchild "))
    return int(line.split()[1])


def gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_children_see_the_test_database_and_the_test_settings(stack):
    execution = Execution.objects.create(workflow_id="harness-check")
    proc = stack.start("probe", shell("""
        import json, os
        from django.conf import settings
        from workflows_app.conf import workflows_settings
        from workflows_app.models import Execution
        print("PROBE " + json.dumps({
            "ids": [str(pk) for pk in Execution.objects.values_list("pk", flat=True)],
            "queue": workflows_settings.MANAGEMENT_QUEUE,
            "heartbeat": workflows_settings.AGENT_HEARTBEAT_SECONDS,
            "broker": settings.CELERY_BROKER_URL,
            "modules": settings.SWITCHYARD_WORKFLOW_MODULES,
            "markers": os.environ.get("SWITCHYARD_TEST_MARKERS"),
        }), flush=True)
    """), expect_exit=True)
    assert proc.wait(timeout=60) == 0, proc.log_text()
    seen = json.loads(next(line for line in proc.log_text().splitlines() if line.startswith("PROBE "))[6:])
    from django.conf import settings

    assert seen["ids"] == [str(execution.pk)]
    assert seen["queue"] == stack.management_queue == f"mgmt-{stack.suffix}"
    assert seen["heartbeat"] == 1
    assert seen["broker"] == settings.CELERY_BROKER_URL
    assert seen["modules"] == ["tests.workflows"]
    assert seen["markers"] == str(stack.markers_dir)
    assert stack.agent_name("host-1") == f"host-1-{stack.suffix}"
    # The test process uses the same engine settings.
    from workflows_app.conf import workflows_settings

    assert workflows_settings.MANAGEMENT_QUEUE == stack.management_queue


def test_a_process_that_dies_fails_the_wait_with_its_log(stack):
    proc = stack.start("doomed", shell("""
        print("about to fail: disk on fire", flush=True)
        raise SystemExit(3)
    """))
    with pytest.raises(AssertionError) as failure:
        stack.wait_for(lambda: False, timeout=60, what="something that never happens")
    assert proc.returncode == 3
    assert "doomed" in str(failure.value) and "exited 3" in str(failure.value)
    assert "about to fail: disk on fire" in str(failure.value)
    proc.expected_exit = True


def test_the_failure_report_prints_every_log(tmp_path):
    """What the fixture prints when a test failed: each process' state and log."""
    from tests.integration.harness import Stack

    stack = Stack(tmp_path, suffix="x", workflows={"MANAGEMENT_QUEUE": "mgmt-x"}, markers_dir=tmp_path)
    try:
        one = stack.start("one", [sys.executable, "-c", "print('first child speaking')"], expect_exit=True)
        two = stack.start("two", [sys.executable, "-c", "print('second child speaking')"], expect_exit=True)
        one.wait(timeout=30), two.wait(timeout=30)
    finally:
        out = io.StringIO()
        stack.close(failed=True, out=out)
    report = out.getvalue()
    assert "first child speaking" in report and "second child speaking" in report
    assert "one (pid" in report and "exited 0" in report
    quiet = io.StringIO()
    stack.close(failed=False, out=quiet)
    assert quiet.getvalue() == ""


def test_teardown_leaves_no_process_behind(tmp_path, stack):
    sleeper = stack.start("sleeper", SLEEPER)
    spawner = stack.start("spawner", SPAWNER)
    grandchild = grandchild_pid(spawner)
    wait_for_line(sleeper, "sleeper up")
    pids = [sleeper.pid, spawner.pid, grandchild]
    assert not any(gone(pid) for pid in pids)

    stack.close()

    assert [pid for pid in pids if not gone(pid)] == []
    for proc in (sleeper, spawner):
        assert not proc.alive()


def test_kill_leaves_other_groups_running_until_teardown(stack):
    spawner = stack.start("spawner", SPAWNER)
    grandchild = grandchild_pid(spawner)
    assert stack.kill(spawner) == -signal.SIGKILL
    assert not spawner.alive()
    # Like an agent's pool process: in a group of its own, it outlives its parent's SIGKILL...
    assert not gone(grandchild)
    stack.close()
    # ...but not the test.
    assert gone(grandchild)


def test_stop_escalates_to_sigkill_and_restart_starts_the_same_command(stack):
    stubborn = stack.start("stubborn", shell("""
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ignoring SIGTERM", flush=True)
        time.sleep(60)
    """))
    wait_for_line(stubborn, "ignoring SIGTERM")
    started = time.monotonic()
    assert stack.stop(stubborn, timeout=1) == -signal.SIGKILL
    assert time.monotonic() - started < 8

    again = stack.restart(stubborn)
    assert again is not stubborn and again.argv == stubborn.argv and again.name == "stubborn"
    assert again.log_path.name == "stubborn.2.log"
    wait_for_line(again, "ignoring SIGTERM")
    stack.check_processes()  # the stopped one is no error; the new one runs
    assert stack.stop(again, timeout=0.5) == -signal.SIGKILL


def test_wait_for_status_times_out_with_the_execution_described(stack):
    execution = Execution.objects.create(workflow_id="described", status=ExecutionStatus.STARTED)
    Operation.objects.create(execution=execution, name="step-one", operation="noop", agent="nowhere",
                             state=OperationState.SENT, attempt=1)
    Event.objects.create(execution=execution, type=EventType.TASK_SENT, operation="step-one",
                         message="pending -> sent", data={"from": "pending", "to": "sent", "attempt": 1})
    with pytest.raises(AssertionError) as failure:
        stack.wait_for_status(execution.pk, ["completed", "failed"], timeout=0.5)
    text = str(failure.value)
    assert "completed or failed" in text
    assert "status started" in text
    assert "step-one [noop] on nowhere: sent, attempt 1" in text
    assert "task_sent step-one" in text
    assert describe_execution(execution.pk) in text


def test_wait_for_agent_wants_a_heartbeat_after_registration(stack):
    from django.utils import timezone

    from agents.models import Agent

    name = stack.agent_name("nobody")
    now = timezone.now()
    Agent.objects.create(name=name, started_at=now, last_heartbeat=now)
    with pytest.raises(AssertionError, match="to heart-beat"):
        stack.wait_for_agent(name, timeout=0.5)
    Agent.objects.filter(name=name).update(last_heartbeat=timezone.now())
    assert stack.wait_for_agent(name, timeout=5).name == name


def test_the_event_invariant_catches_a_task_event_after_the_end(stack):
    execution = Execution.objects.create(workflow_id="inv", status=ExecutionStatus.COMPLETED)
    Operation.objects.create(execution=execution, name="a", operation="noop", agent="x",
                             state=OperationState.SUCCEEDED, attempt=1)
    path = [("pending", "sending"), ("sending", "sent"), ("sent", "started"), ("started", "succeeded")]
    for source, target in path:
        Event.objects.create(execution=execution, operation="a", type=f"task_{target}",
                             data={"from": source, "to": target, "attempt": 1})
    Event.objects.create(execution=execution, type=EventType.WORKFLOW_COMPLETED, data={"from": "started", "to": "completed"})
    assert_operation_events_consistent(execution)

    Event.objects.create(execution=execution, operation="a", type=EventType.TASK_CANCELLED,
                         data={"from": "succeeded", "to": "cancelled", "attempt": 1})
    with pytest.raises(AssertionError) as failure:
        assert_operation_events_consistent(execution)
    text = str(failure.value)
    assert "task events after" in text and "the events end in cancelled, the row is succeeded" in text
    # The broken log was made on purpose: removed, so that the check the stack fixture runs over
    # every ended execution after each test does not report it.
    execution.delete()
