"""The commands a script runs against a real manager and agent: ``--wait`` shows the
progress (operations done of total, per state) with tqdm on stderr and exits non-zero unless the
execution completed; with ``--json`` stdout holds only the execution once it ended, as the REST
API shows it; ``tail_events --follow --json`` streams the events as they are written.

Each command runs as its own ``python manage.py`` process in the stack's environment, stdout and
stderr apart, as a shell script would run it.
"""

import json
import re
import subprocess
import sys

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from tests.api.conftest import VIEWER, make_user
from tests.integration.harness import ROOT, assert_operation_events_consistent
from workflows_app.models import Execution

pytestmark = pytest.mark.integration

API = "/api/v1"
TIMEOUT = 120
#: One drawing of the progress bar: "started: 2 of 5 operations done |##   | [00:01, succeeded=2, started=1]".
PROGRESS = re.compile(r"(?P<status>[a-z_]+): (?P<done>\d+) of (?P<total>\d+) operations done \|.*?\| \[[0-9:]+(?P<counts>[^\]]*)\]")


def script_env(stack) -> dict:
    """The stack's environment as a script has it: without PYTHONUNBUFFERED (which the stack's
    own processes get), so that stdout is block-buffered on a pipe and streaming must flush."""
    return {k: v for k, v in stack.env.items() if k != "PYTHONUNBUFFERED"}


def manage(stack, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=script_env(stack), capture_output=True,
                          text=True, timeout=TIMEOUT)


def popen(stack, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "manage.py", *args], cwd=ROOT, env=script_env(stack),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def progress(stderr) -> list[dict]:
    """Every drawing of the bar on stderr (tqdm redraws its line with carriage returns)."""
    return [match.groupdict() for match in PROGRESS.finditer(stderr)]


def api_body(path, **query) -> str:
    client = APIClient()
    client.force_authenticate(get_user_model().objects.filter(username="ops").first() or make_user("ops", VIEWER))
    response = client.get(path, query)
    assert response.status_code == 200, response.content
    return response.content.decode()


@pytest.fixture
def agent(stack):
    """A manager and one agent, ready; the agent's name."""
    stack.start_manager()
    name = stack.agent_name("host-1")
    stack.start_agent(name)
    stack.wait_for_agent(name)
    return name


@pytest.mark.django_db(transaction=True)
def test_start_execution_wait_json_shows_progress_on_stderr_and_prints_the_ended_execution(stack, agent):
    done = manage(stack, "start_execution", "it_chain", "--param", "n=4", "--param", f"agents={json.dumps([agent])}",
                  "--wait", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)  # one document, nothing around it
    assert document["status"] == "completed" and document["payload"] == {"count": 4, "last": 4}
    assert document["operations_summary"]["succeeded"] == 4 and sum(document["operations_summary"].values()) == 4
    assert done.stdout == api_body(f"{API}/executions/{document['id']}") + "\n"

    drawn = progress(done.stderr)
    assert drawn, done.stderr
    assert drawn[-1] == {"status": "completed", "done": "4", "total": "4", "counts": ", succeeded=4"}
    assert all(int(bar["done"]) <= int(bar["total"]) for bar in drawn)
    assert "Traceback" not in done.stderr and "CommandError" not in done.stderr
    assert_operation_events_consistent(document["id"])


@pytest.mark.django_db(transaction=True)
def test_a_failed_wait_exits_non_zero_and_resume_wait_follows_it_to_completed(stack, agent, tmp_path):
    cause = tmp_path / "fixed"
    failed = manage(stack, "start_execution", "it_resumable", "--param", f"agent={agent}", "--param",
                    f"path={cause}", "--wait", "--json")
    assert failed.returncode == 1, failed.stderr
    document = json.loads(failed.stdout)
    pk = document["id"]
    assert document["status"] == "failed" and "needs" in document["error"]
    assert {k: v for k, v in document["operations_summary"].items() if v} == {"succeeded": 1, "failed": 1}
    assert failed.stdout == api_body(f"{API}/executions/{pk}") + "\n"
    last = failed.stderr.splitlines()[-1]
    assert last.startswith(f"CommandError: execution {pk} ended failed: ") and "Traceback" not in failed.stderr
    assert progress(failed.stderr)[-1]["status"] == "failed"

    cause.write_text("the cause is fixed")
    resumed = manage(stack, "resume_execution", pk, "--wait")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.splitlines() == [f"{pk} started", "completed: 3 of 3 operations done (succeeded=3)"]
    drawn = progress(resumed.stderr)
    assert drawn[-1] == {"status": "completed", "done": "3", "total": "3", "counts": ", succeeded=3"}
    assert "Traceback" not in resumed.stderr

    again = manage(stack, "resume_execution", pk, "--wait", "--json")  # completed: refused, one line
    assert again.returncode == 1 and again.stdout == ""
    assert again.stderr.splitlines() == [f"CommandError: cannot resume execution {pk}: it is completed "
                                         "(resume is allowed from cancelled, failed, started)"]
    assert Execution.objects.get(pk=pk).status == "completed"


@pytest.mark.django_db(transaction=True)
def test_tail_events_follow_json_streams_events_as_they_are_written_until_the_end(stack, agent):
    start = popen(stack, "start_execution", "it_single", "--param", f"agent={agent}", "--param", "seconds=3",
                  "--wait")
    pk = start.stdout.readline().strip()  # printed before the wait: a script has the id at once
    tail = popen(stack, "tail_events", pk, "--follow", "--json")
    first = json.loads(tail.stdout.readline())
    assert first["execution_id"] == pk and first["type"] == "log"
    assert Execution.objects.get(pk=pk).status not in ("completed", "failed"), "the first event came only at the end"

    # Read on from the same buffered reader (communicate() would skip what it holds already).
    events = [first] + [json.loads(line) for line in tail.stdout]
    assert (tail.wait(timeout=TIMEOUT), tail.stderr.read()) == (0, "")
    assert events == json.loads(api_body(f"{API}/events", execution_id=pk))["results"]
    assert "workflow_completed" in [event["type"] for event in events]

    start_out, start_err = start.stdout.read(), start.stderr.read()
    assert start.wait(timeout=TIMEOUT) == 0, start_err
    assert start_out.splitlines() == ["completed: 1 of 1 operations done (succeeded=1)"]
    assert any(bar["status"] == "started" for bar in progress(start_err)), start_err
