"""The commands scripts call: ``--json`` prints what the REST API shows — the same
bytes as ``GET /api/v1/...`` —, ``tail_events --json`` one event per line, and every bad input or
refused action is one line on stderr and a non-zero exit, never a traceback.

The JSON is compared in process (``call_command``) with what DRF's test client gets from the
API; what a script sees of stdout, stderr and the exit status is checked on ``python manage.py``
run as a child process against the test's database (the tests are transactional, so that it
sees their rows). ``--wait`` against a real manager and agent: ``tests/integration/test_commands_cli.py``.
"""

import io
import json
import re
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.core.management import CommandError, call_command
from django.core.management.base import BaseCommand
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from kombu import Exchange, Queue
from rest_framework.test import APIClient

from switchyard.celery import app
from tests.api.conftest import OPERATOR, make_user
from tests.integration.harness import ROOT, child_environment
from workflows_app import retention
from workflows_app.errors import InvalidTransition
from workflows_app.management import cli
from workflows_app.models import Event, Execution, Operation
from workflows_app.states import ExecutionStatus, OperationState
from workflows_app.transitions import record_event

API = "/api/v1"


@pytest.fixture
def api(db):
    client = APIClient()
    client.force_authenticate(make_user("ops", OPERATOR))
    return client


def command(*args) -> tuple[str, str]:
    """``call_command(*args)``: what it printed on stdout and on stderr."""
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def api_body(api, path, **query) -> str:
    response = api.get(path, query)
    assert response.status_code == 200, response.content
    return response.content.decode()


@pytest.fixture
def failed(make_execution, make_operation):
    """A failed execution: ``a`` succeeded, ``b`` failed, ``c`` cancelled."""
    execution = make_execution(status=ExecutionStatus.FAILED, token_hash="f" * 64, error="step 'b' failed: boom\nTraceback")
    make_operation(OperationState.SUCCEEDED, execution, name="a", attempt=1)
    make_operation(OperationState.FAILED, execution, name="b", attempt=1)
    make_operation(OperationState.CANCELLED, execution, name="c")
    return execution


# --- --json is the API's JSON ---------------------------------------------------------------------

def test_start_execution_json_is_the_execution_as_the_api_shows_it(api):
    out, err = command("start_execution", "demo", "--param", "n=2", "--param", "agent=host-1", "--json")
    document = json.loads(out)
    assert document["status"] == "pending" and document["parameters"] == {"n": 2, "agent": "host-1"}
    assert document["operations_summary"] == dict.fromkeys(OperationState.values, 0)
    assert out == api_body(api, f"{API}/executions/{document['id']}") + "\n"
    assert err == ""


def test_start_execution_options_reach_the_service(db):
    """--failure-mode, --dry-run, --deployment, and --queue / --force beside a busy deployment."""
    def start(*options):
        return json.loads(command("start_execution", "demo", "--json", *options)[0])

    first = start("--deployment", "d7", "--failure-mode", "fail_fast", "--dry-run")
    assert (first["failure_mode"], first["is_dry_run"], first["deployment_id"]) == ("fail_fast", True, "d7")
    Execution.objects.filter(pk=first["id"]).update(status=ExecutionStatus.STARTED)  # set-up: it holds d7
    assert start("--deployment", "d7", "--queue")["status"] == "queued"
    beside = start("--deployment", "d7", "--force")
    assert (beside["status"], beside["failure_mode"], beside["is_dry_run"]) == ("pending", "no_new_calls", False)


def test_start_execution_without_json_prints_the_id_only(db):
    out, _ = command("start_execution", "demo")
    assert Execution.objects.get(pk=uuid.UUID(out.strip())).workflow_id == "demo"


def test_cancel_execution_json_is_the_execution_as_the_api_shows_it_after_the_action(api, running):
    out, _ = command("cancel_execution", str(running.pk), "--json")
    assert json.loads(out)["status"] == "cancelling"
    assert json.loads(out)["operations_summary"]["cancelled"] == 1  # "next", which had not started
    assert out == api_body(api, f"{API}/executions/{running.pk}") + "\n"
    out, _ = command("cancel_execution", str(running.pk), "--force", "--json")
    assert json.loads(out)["status"] == "cancelled"
    assert out == api_body(api, f"{API}/executions/{running.pk}") + "\n"


def test_resume_execution_json_is_the_execution_as_the_api_shows_it(api, failed):
    out, _ = command("resume_execution", str(failed.pk), "--json")
    document = json.loads(out)
    assert document["status"] == "started" and document["error"] == ""
    assert document["operations_summary"]["succeeded"] == 1 and document["operations_summary"]["failed"] == 0
    assert out == api_body(api, f"{API}/executions/{failed.pk}") + "\n"


def test_list_executions_json_is_an_array_of_the_api_list_items(api, make_execution):
    for status in ("completed", "failed", "started", "failed"):
        make_execution(status=status)
    out, _ = command("list_executions", "--json")
    assert json.loads(out) == json.loads(api_body(api, f"{API}/executions"))["results"]
    assert len(json.loads(out)) == 4
    out, _ = command("list_executions", "--status", "failed", "--limit", "1", "--json")
    page = json.loads(api_body(api, f"{API}/executions", status="failed", limit=1))
    assert json.loads(out) == page["results"] and page["count"] == 2 and len(json.loads(out)) == 1
    out, _ = command("list_executions", "--status", "queued", "--json")
    assert out == "[]\n"


def test_tail_events_json_prints_one_event_per_line_as_get_events_shows_them(api, failed):
    record_event(failed.pk, "log", "first", {"n": 1})
    record_event(failed.pk, "task_failed", "b failed", {"from": "started", "to": "failed"}, operation="b")
    out, _ = command("tail_events", str(failed.pk), "--json")
    lines = out.splitlines()
    assert len(lines) == 2 and all(line.startswith("{") for line in lines)
    api_events = json.loads(api_body(api, f"{API}/events", execution_id=str(failed.pk)))["results"]
    assert [json.loads(line) for line in lines] == api_events
    assert api_events[1]["operation"] == "b" and api_events[1]["type"] == "task_failed"


def test_tail_events_follow_stops_once_an_ended_execution_has_no_more_events(failed):
    record_event(failed.pk, "log", "late", {})
    out, _ = command("tail_events", str(failed.pk), "--follow", "--json")
    assert [json.loads(line)["message"] for line in out.splitlines()] == ["late"]


def test_tail_events_prints_a_long_history_whole_in_order(failed):
    Event.objects.bulk_create([Event(execution=failed, type="log", message=f"m{i}") for i in range(1203)])
    out, _ = command("tail_events", str(failed.pk), "--json")
    ids = [json.loads(line)["id"] for line in out.splitlines()]
    assert len(ids) == 1203 and ids == sorted(ids)


def test_tail_events_tree_prints_the_events_of_every_descendant_in_one_stream(failed, make_execution):
    child = make_execution(ExecutionStatus.FAILED, parent=failed, parent_step="child0")
    grandchild = make_execution(ExecutionStatus.FAILED, parent=child, parent_step="sub")
    stranger = make_execution(ExecutionStatus.FAILED)
    for execution in (grandchild, stranger, child, failed):
        record_event(execution.pk, "log", f"from {execution.pk}", {})
    out, _ = command("tail_events", str(failed.pk), "--tree", "--json")
    assert [json.loads(line)["execution_id"] for line in out.splitlines()] == [str(grandchild.pk), str(child.pk), str(failed.pk)]
    out, _ = command("tail_events", str(failed.pk), "--tree", "--follow")
    assert [line[:8] for line in out.splitlines()] == [str(grandchild.pk)[:8], str(child.pk)[:8], str(failed.pk)[:8]]
    out, _ = command("tail_events", str(failed.pk), "--json")
    assert [json.loads(line)["execution_id"] for line in out.splitlines()] == [str(failed.pk)]


def test_send_event_json_is_the_stored_event_as_the_api_shows_it(api, running):
    out, _ = command("send_event", str(running.pk), "approve", "--payload", '{"by": "ops"}', "--json")
    event = json.loads(out)
    assert event["type"] == "event_received" and event["data"] == {"name": "approve", "payload": {"by": "ops"}}
    assert event in json.loads(api_body(api, f"{API}/events", execution_id=str(running.pk)))["results"]


# --- following an execution --------------------------------------------------------------------

def test_follow_shows_done_of_total_and_counts_states_with_one_aggregate_query(failed, make_operation):
    for i in range(30):
        make_operation(OperationState.SUCCEEDED, failed, name=f"more-{i}")
    stream = io.StringIO()
    with CaptureQueriesContext(connection) as queries:
        assert cli.follow(failed.pk, stream) == ExecutionStatus.FAILED
    assert len(queries) == 2, [q["sql"] for q in queries]  # the status, and the counts
    assert "COUNT(" in queries[1]["sql"].upper() and "GROUP BY" in queries[1]["sql"].upper()
    last = stream.getvalue().replace("\r", "\n").strip().splitlines()[-1]
    assert last.startswith("failed: 33 of 33 operations done |")
    assert "succeeded=31, failed=1, cancelled=1" in last
    assert stream.getvalue().endswith("cancelled=1]\n"), "the bar left drawn, what follows on a line of its own"


def test_follow_shows_each_warning_once_on_a_line_of_its_own_above_the_bar(make_execution, make_operation):
    execution = make_execution(status=ExecutionStatus.STARTED)
    make_operation(OperationState.SUCCEEDED, execution, name="first", agent="host-1")
    make_operation(OperationState.SENT, execution, name="second", agent="nowhere")
    stream = io.StringIO()
    assert cli.follow(execution.pk, stream, timeout=cli.POLL_SECONDS * 3) == ExecutionStatus.STARTED
    shown = stream.getvalue()
    assert shown.count("warning:") == 1, shown  # looked at 4 times, shown once
    line = "\nwarning: step 'second' waits for agent 'nowhere', which has never been seen\n"
    assert line in shown.replace("\r", "\n"), shown
    after = shown.split("warning:")[1].split("\n", 1)[1]
    assert after.lstrip("\r").startswith("started: 1 of 2 operations done |"), "the bar drawn again below it"
    assert shown.endswith("\n")


class Stderr(io.StringIO):
    """What a command's stderr is: a terminal (``tty``), or a CI log, a file, a pipe."""

    def __init__(self, tty):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


#: One drawing of the progress: its status, operations done, and of how many.
DRAWING = re.compile(r"^([a-z_]+): (\d+) of (\d+) operations done \|")


@pytest.fixture
def moving(monkeypatch):
    """``start_execution demo --wait``, its execution moved on between two looks of the wait (what
    a manager and an agent would do): started with one operation pending, which succeeds, a look
    with no change, then completed. What the command wrote on stdout and on ``stderr``."""
    def moves():
        execution = Execution.objects.get()
        Execution.objects.filter(pk=execution.pk).update(status=ExecutionStatus.STARTED)
        yield
        Operation.objects.create(execution=execution, name="a", operation="noop", agent="management")
        yield
        Operation.objects.filter(name="a").update(state=OperationState.SUCCEEDED)
        yield
        yield  # nothing changed
        Execution.objects.filter(pk=execution.pk).update(status=ExecutionStatus.COMPLETED)
        yield

    steps = moves()
    monkeypatch.setattr(cli, "time", SimpleNamespace(monotonic=time.monotonic, sleep=lambda seconds: next(steps)))

    def run(stderr):
        out = io.StringIO()
        call_command("start_execution", "demo", "--wait", stdout=out, stderr=stderr)
        return out.getvalue(), stderr.getvalue()

    return run


def test_a_wait_whose_stderr_is_not_a_terminal_writes_a_line_per_change(db, moving):
    """A CI log gets each drawing once, on a line of its own, and no carriage return."""
    out, err = moving(Stderr(tty=False))
    assert "\r" not in err and err.endswith("\n")
    drawn = [DRAWING.match(line).groups() for line in err.splitlines()]
    assert drawn == [("pending", "0", "0"), ("started", "0", "0"), ("started", "0", "1"), ("started", "1", "1"),
                     ("completed", "1", "1")], err
    assert out.splitlines()[-1] == "completed: 1 of 1 operations done (succeeded=1)"


def test_a_wait_on_a_terminal_redraws_its_bar_in_place(db, moving):
    out, err = moving(Stderr(tty=True))
    assert err.count("\n") == 1 and err.endswith("\n"), "one line, redrawn after carriage returns"
    drawn = [DRAWING.match(drawing).groups() for drawing in err.strip("\n").split("\r") if drawing.strip()]
    assert drawn[0] == ("pending", "0", "0") and drawn[-1] == ("completed", "1", "1")
    assert ("started", "1", "1") in drawn
    assert len(drawn) > 5, "drawn at every look, so that its clock runs"


def test_a_warning_in_a_log_is_a_line_of_its_own(make_execution, make_operation):
    execution = make_execution(status=ExecutionStatus.STARTED, token_hash="s" * 64)
    make_operation(OperationState.SENT, execution, name="second", agent="nowhere")
    stderr = Stderr(tty=False)
    with pytest.raises(CommandError, match="is still started after"):
        call_command("resume_execution", str(execution.pk), "--wait", "--timeout", "0.2", stdout=io.StringIO(),
                     stderr=stderr)
    lines = stderr.getvalue().splitlines()
    assert "\r" not in stderr.getvalue()
    assert lines.count("warning: step 'second' waits for agent 'nowhere', which has never been seen") == 1, lines
    assert all(DRAWING.match(line) for line in lines if not line.startswith("warning: ")), lines


def test_a_purge_in_a_log_writes_its_progress_in_lines(make_execution, monkeypatch):
    for _ in range(3):
        make_execution(status=ExecutionStatus.COMPLETED, ended_at=timezone.now() - timedelta(days=40))
    monkeypatch.setattr(retention, "BATCH_SIZE", 1)  # a purge of several batches shows its progress
    stderr = Stderr(tty=False)
    call_command("purge_executions", "--older-than", "30", stdout=io.StringIO(), stderr=stderr)
    assert "\r" not in stderr.getvalue() and stderr.getvalue().endswith("\n")
    assert stderr.getvalue().splitlines()[-1].startswith("purge: 3 of 3 executions looked at |")


def a_command():
    return BaseCommand(stdout=io.StringIO(), stderr=io.StringIO())


def test_a_wait_that_ends_failed_prints_the_execution_and_fails_with_its_whole_error(failed):
    """Every line of the error, indented below the reason's first line: a workflow that raised
    stored its traceback, whose last line is the exception and its message."""
    failed.error = ("the workflow function raised:\nTraceback (most recent call last):\n"
                    '  File "flows.py", line 9, in deploy\n    raise ValueError("no disk")\nValueError: no disk\n')
    failed.save(update_fields=["error"])  # set-up: what the dispatcher stores
    waiting = a_command()
    with pytest.raises(CommandError) as ended:
        cli.wait_and_report(waiting, failed.pk, as_json=True)
    assert str(ended.value).splitlines() == [
        f"execution {failed.pk} ended failed:",
        "  the workflow function raised:",
        "  Traceback (most recent call last):",
        '    File "flows.py", line 9, in deploy',
        '      raise ValueError("no disk")',
        "  ValueError: no disk",
    ]
    assert json.loads(waiting.stdout.getvalue())["status"] == "failed"
    assert "3 of 3 operations done" in waiting.stderr.getvalue()


@pytest.mark.parametrize("error, says", [
    ("step 'b' failed: boom", ": step 'b' failed: boom"),  # one line: on the reason's line
    ("", ""),
])
def test_a_wait_that_ends_with_a_short_error_says_it_in_one_line(failed, error, says):
    Execution.objects.filter(pk=failed.pk).update(status=ExecutionStatus.TIMED_OUT, error=error)  # set-up
    with pytest.raises(CommandError) as ended:
        cli.wait_and_report(a_command(), failed.pk, as_json=False)
    assert str(ended.value) == f"execution {failed.pk} ended timed_out{says}"


def test_a_wait_that_ends_completed_ends_with_a_line_that_starts_with_the_status(make_execution, make_operation):
    execution = make_execution(status=ExecutionStatus.COMPLETED)
    make_operation(OperationState.SUCCEEDED, execution, name="a")
    make_operation(OperationState.SUCCEEDED, execution, name="b")
    waiting = a_command()
    cli.wait_and_report(waiting, execution.pk, as_json=False)
    assert waiting.stdout.getvalue() == "completed: 2 of 2 operations done (succeeded=2)\n"


def test_a_wait_that_times_out_prints_the_execution_as_it_is_and_fails(api, failed):
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError, match=f"^execution {failed.pk} is still started after 0.2s$"):
        call_command("resume_execution", str(failed.pk), "--wait", "--timeout", "0.2", "--json", stdout=out, stderr=err)
    assert json.loads(out.getvalue())["status"] == "started"  # one document: the execution when the wait stopped
    assert out.getvalue() == api_body(api, f"{API}/executions/{failed.pk}") + "\n"
    assert "started: 1 of 3 operations done" in err.getvalue()


# --- an execution named by the start of its id ------------------------------------------------

def ids(*texts):
    return [uuid.UUID(text) for text in texts]


@pytest.fixture
def similar(make_execution):
    """Five executions whose ids start with 770b, three of them with 770b968c; one other."""
    made = [make_execution(ExecutionStatus.FAILED, id=pk, token_hash="f" * 64, workflow_id=f"w{i}")
            for i, pk in enumerate(ids(
                "770b968c-1f2a-4c47-9a43-2f0c1c6f1a10", "770b968c-1f2b-4c47-9a43-2f0c1c6f1a10",
                "770b968c-ffff-4c47-9a43-2f0c1c6f1a10", "770b0000-0000-4000-8000-000000000000",
                "770bffff-ffff-4fff-bfff-ffffffffffff", "770c0000-0000-4000-8000-000000000000"))]
    return {str(execution.pk): execution for execution in made}


@pytest.mark.parametrize("typed, resolves_to", [
    ("770b968c-1f2a", "770b968c-1f2a-4c47-9a43-2f0c1c6f1a10"),  # as shown, with its dash
    ("770b968c1f2a", "770b968c-1f2a-4c47-9a43-2f0c1c6f1a10"),  # without
    ("770B968C-1F2B-", "770b968c-1f2b-4c47-9a43-2f0c1c6f1a10"),  # capitals, up to a dash
    ("770b968cf", "770b968c-ffff-4c47-9a43-2f0c1c6f1a10"),
    ("770b0", "770b0000-0000-4000-8000-000000000000"),  # the lowest id of the range
    ("770bf", "770bffff-ffff-4fff-bfff-ffffffffffff"),  # and the highest
    ("770c", "770c0000-0000-4000-8000-000000000000"),
    ("770b968c-1f2a-4c47-9a43-2f0c1c6f1a10", "770b968c-1f2a-4c47-9a43-2f0c1c6f1a10"),
    ("{770b968c1f2a4c479a432f0c1c6f1a10}", "770b968c-1f2a-4c47-9a43-2f0c1c6f1a10"),
])
def test_a_unique_start_of_an_id_names_its_execution(similar, typed, resolves_to):
    assert cli.parse_execution_id(typed) == uuid.UUID(resolves_to)


@pytest.mark.parametrize("typed, says", [
    ("770b968c", "'770b968c' is the start of 3 execution ids: 770b968c-1f2a-4c47-9a43-2f0c1c6f1a10 (w0, failed), "
                 "770b968c-1f2b-4c47-9a43-2f0c1c6f1a10 (w1, failed), "
                 "770b968c-ffff-4c47-9a43-2f0c1c6f1a10 (w2, failed); give more of it"),
    ("770b", "'770b' is the start of 5 execution ids: 770b0000-0000-4000-8000-000000000000 (w3, failed), "
             "770b968c-1f2a-4c47-9a43-2f0c1c6f1a10 (w0, failed), 770b968c-1f2b-4c47-9a43-2f0c1c6f1a10 (w1, failed) "
             "and 2 more; give more of it"),
    ("770a", "no execution '770a'"),
    ("770b968c-1f2a-4c47-9a43-2f0c1c6f1a11", "no execution '770b968c-1f2a-4c47-9a43-2f0c1c6f1a11'"),
    ("770", "no execution '770': give at least 4 digits of its id"),
    ("77-0b", "no execution '77-0b': an execution id is hex digits, with or without its dashes"),
    ("770b-968c", "no execution '770b-968c': an execution id is hex digits, with or without its dashes"),
    ("770g", "no execution '770g': an execution id is hex digits, with or without its dashes"),
    ("770b968c1f2a4c479a432f0c1c6f1a10a", "no execution '770b968c1f2a4c479a432f0c1c6f1a10a': an execution id is"),
    ("", "no execution '': an execution id is hex digits"),
])
def test_a_start_of_an_id_that_names_no_execution_alone_is_refused_in_one_line(similar, typed, says):
    with pytest.raises(CommandError) as refused:
        cli.parse_execution_id(typed)
    assert str(refused.value).startswith(says) and "\n" not in str(refused.value)


@pytest.mark.parametrize("typed", ["\x00", "77\x000b", "770b\ud800", "nan", "NaN", "7" * 3_000_000, "x" * 3_000_000])
def test_whatever_is_typed_for_an_id_is_refused_in_one_short_line(similar, typed):
    with pytest.raises(CommandError) as refused:
        cli.parse_execution_id(typed)
    said = str(refused.value)
    assert said.startswith("no execution ") and "\n" not in said and len(said) < 200, said[:300]


def test_a_start_of_an_id_is_one_range_of_the_primary_key_index(similar):
    """A prefix is the ids between it padded with 0s and with fs: the database searches the
    primary key's index, it does not read the table."""
    with CaptureQueriesContext(connection) as queries:
        cli.parse_execution_id("770b968c-1f2a")
    assert len(queries) == 1, [q["sql"] for q in queries]
    sql = queries[0]["sql"]
    assert "LIKE" not in sql.upper() and ">=" in sql and "<=" in sql
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("EXPLAIN QUERY PLAN " + sql)
            plan = " ".join(str(row) for row in cursor.fetchall())
            assert "SEARCH" in plan and "INDEX" in plan and "SCAN" not in plan, plan
        elif connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")  # a small table: the planner would read it all
            cursor.execute("EXPLAIN " + sql)
            plan = " ".join(row[0] for row in cursor.fetchall())
            assert "Index" in plan and "Seq Scan" not in plan, plan


def test_every_command_on_an_execution_takes_the_start_of_its_id(api, running, similar):
    prefix = str(running.pk)[:8]
    out, _ = command("send_event", prefix, "approve", "--json")
    assert json.loads(out)["execution_id"] == str(running.pk)
    out, _ = command("tail_events", prefix, "--json")
    assert [json.loads(line)["type"] for line in out.splitlines()] == ["event_received"]
    out, _ = command("cancel_execution", prefix.upper(), "--json")
    assert json.loads(out)["id"] == str(running.pk) and json.loads(out)["status"] == "cancelling"
    out, _ = command("resume_execution", "770b968c-1f2a")
    assert out == "770b968c-1f2a-4c47-9a43-2f0c1c6f1a10 started\n"
    with pytest.raises(CommandError, match="^'770b968c' is the start of 3 execution ids: "):
        command("resume_execution", "770b968c")


def test_a_transition_refused_under_the_command_is_one_line_too():
    """A race the status check before it could not see (the row changed under the service)."""
    def changed_under_us(pk):
        raise InvalidTransition("execution", pk, "started", "cancelling", current="completed")

    with pytest.raises(CommandError) as refused:
        cli.call(changed_under_us, "e-1")
    assert str(refused.value) == "execution e-1: cannot go from started to cancelling (it is completed now)"


# --- what a script sees: stdout, stderr, exit status ------------------------------------------------

def manage(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def child_env(transactional_db, tmp_path):
    """``manage.py`` on the test's database and broker, with the test workflows; what it starts
    goes to a management queue of its own, which nothing consumes and which is deleted after."""
    queue = f"mgmt-cmd-{uuid.uuid4().hex[:8]}"
    env = child_environment(workflows={"MANAGEMENT_QUEUE": queue}, markers_dir=tmp_path)
    env.pop("PYTHONUNBUFFERED")  # as a script runs it: stdout block-buffered on a pipe
    yield env
    with app.connection_for_write() as broker:
        # Declared here first: kombu deletes only the bindings this connection knows of.
        declared = Queue(queue, Exchange(queue, "direct"), routing_key=queue, channel=broker.default_channel)
        declared.declare()
        declared.delete()


@pytest.fixture
def executions(transactional_db, make_execution):
    return {
        "completed": make_execution(status=ExecutionStatus.COMPLETED, workflow_id="it_single"),
        "started": make_execution(status=ExecutionStatus.STARTED, workflow_id="it_single", deployment_id="d1",
                                  token_hash="s" * 64),
        "unknown": uuid.uuid4(),
    }


REFUSED = [
    # (argv, what the one line on stderr says); {name} is the id of executions[name]
    (["start_execution", "it_nope"], "CommandError: no workflow named 'it_nope' is registered"),
    (["start_execution", "it_single", "--param", "agent"], "CommandError: --param takes k=v, not 'agent'"),
    (["start_execution", "it_single", "--param", "agent=a", "--param", "colour=red"], "unknown parameter(s): colour"),
    (["start_execution", "it_single"], "missing required parameter(s): agent"),
    (["start_execution", "it_typed", "--param", "n=three"],
     "CommandError: workflow 'it_typed': parameter 'n': expected integer, got string \"three\""),
    (["start_execution", "it_single", "--param", "agent=a", "--failure-mode", "sometimes"],
     "failure_mode must be one of"),
    (["start_execution", "it_single", "--param", "agent=a", "--deployment", "d1"],
     "CommandError: deployment 'd1' has an active execution ({started})"),
    (["cancel_execution", "not-a-uuid"], "CommandError: no execution 'not-a-uuid': an execution id is hex digits"),
    (["cancel_execution", "{completed8}"], "CommandError: cannot cancel execution {completed}: it is completed"),
    (["resume_execution", "{started3}"], "CommandError: no execution '{started3}': give at least 4 digits"),
    (["cancel_execution", "{unknown}"], "CommandError: no execution '{unknown}'"),
    (["cancel_execution", "{completed}"], "CommandError: cannot cancel execution {completed}: it is completed"),
    (["cancel_execution", "{started}", "--force", "--kill"],
     "manage.py cancel_execution: error: argument --kill: not allowed with argument --force"),
    (["resume_execution", "{completed}"], "CommandError: cannot resume execution {completed}: it is completed"),
    (["resume_execution", "{started}", "--force"], "CommandError: cannot force-resume execution {started}"),
    (["resume_execution", "{unknown}", "--wait"], "CommandError: no execution '{unknown}'"),
    (["list_executions", "--status", "done"], "CommandError: --status must be one of pending, queued"),
    (["list_executions", "--limit", "0"], "CommandError: --limit must be from 1 to 10000, not 0"),
    (["list_executions", "--limit", "many"], "argument --limit: invalid int value: 'many'"),
    (["tail_events", "not-a-uuid"], "CommandError: no execution 'not-a-uuid': an execution id is hex digits"),
    (["tail_events", "{unknown}", "--follow"], "CommandError: no execution '{unknown}'"),
    (["send_event", "{completed}", "go"], "CommandError: cannot send an event to execution {completed}"),
    (["send_event", "{started}", "go", "--payload", "{{nope"], "CommandError: --payload is not JSON"),
    (["send_event", "{started}", ""], "CommandError: "),
    (["start_execution"], "CommandError: name the workflow to start, or --rerun-of an execution (not both)"),
    (["start_execution", "--rerun-of", "{started}"], "CommandError: --rerun-of and --from-step go together"),
]


@pytest.mark.integration
@pytest.mark.slow  # a process per command and refusal
def test_every_bad_input_and_refusal_is_one_line_on_stderr_and_a_non_zero_exit(child_env, executions):
    """Each case also with --json: stdout stays empty, so a script never parses half a result."""
    ids = {name: str(getattr(value, "pk", value)) for name, value in executions.items()}
    ids.update(completed8=ids["completed"][:8], started3=ids["started"][:3])  # ids as the lists show them
    cases = [([arg.format(**ids) for arg in argv] + ["--json"], says.format(**ids)) for argv, says in REFUSED]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda case: manage(child_env, *case[0]), cases))
    wrong = []
    for (argv, says), done in zip(cases, results):
        lines = done.stderr.splitlines()
        if done.returncode == 0 or done.stdout or len(lines) != 1 or says not in lines[0] or "Traceback" in done.stderr:
            wrong.append(f"{' '.join(argv)}\n  exit {done.returncode}, stdout {done.stdout!r}\n  stderr {done.stderr!r}"
                         f"\n  expected one line with {says!r}")
    assert not wrong, "\n".join(wrong)
    assert Execution.objects.get(pk=executions["completed"].pk).status == "completed"
    assert Execution.objects.get(pk=executions["started"].pk).status == "started"
    assert Execution.objects.count() == 2  # no start that was refused left a row


@pytest.mark.integration
def test_json_on_stdout_is_one_document_and_nothing_else(child_env, executions, api):
    started = manage(child_env, "start_execution", "it_single", "--param", "agent=a", "--json")
    assert (started.returncode, started.stderr) == (0, "")
    document = json.loads(started.stdout)  # one document: json.loads refuses anything around it
    assert started.stdout == api_body(api, f"{API}/executions/{document['id']}") + "\n"

    listed = manage(child_env, "list_executions", "--json")
    assert (listed.returncode, listed.stderr) == (0, "")
    assert json.loads(listed.stdout) == json.loads(api_body(api, f"{API}/executions"))["results"]
    assert [row["id"] for row in json.loads(listed.stdout)][0] == document["id"]

    cancelled = manage(child_env, "cancel_execution", document["id"], "--json")
    assert (cancelled.returncode, cancelled.stderr) == (0, "")
    assert json.loads(cancelled.stdout)["status"] == "cancelled"  # pending: cancelled at once
    assert cancelled.stdout == api_body(api, f"{API}/executions/{document['id']}") + "\n"

    tailed = manage(child_env, "tail_events", document["id"], "--follow", "--json")
    assert (tailed.returncode, tailed.stderr) == (0, "")
    lines = [json.loads(line) for line in tailed.stdout.splitlines()]
    assert lines == json.loads(api_body(api, f"{API}/events", execution_id=document["id"]))["results"]
    assert [event["type"] for event in lines] == ["log", "workflow_cancelled"]


@pytest.mark.integration
def test_a_reader_of_stdout_that_goes_away_ends_the_command_quietly(child_env, executions):
    """``tail_events ID --json | head -1``: no traceback, the exit status of ``cat`` in its place."""
    execution = executions["completed"]
    Event.objects.bulk_create([Event(execution=execution, type="log", message="x" * 200) for _ in range(2000)])
    tail = subprocess.Popen([sys.executable, "manage.py", "tail_events", str(execution.pk), "--json"], cwd=ROOT,
                            env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert json.loads(tail.stdout.readline())["execution_id"] == str(execution.pk)
    tail.stdout.close()  # what head does once it has its line
    assert tail.wait(timeout=60) == 141
    assert tail.stderr.read() == ""
