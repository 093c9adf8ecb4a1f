"""The commands a script runs against a real manager and agent: ``--wait`` shows the
progress (operations done of total, per state) with tqdm on stderr, with a line for each warning
(a step sent to an agent that never came), and exits non-zero unless the execution completed,
with the execution's whole error; with ``--json`` stdout holds only the execution once it ended,
as the REST API shows it; ``tail_events --follow --json`` streams the events as they are written.

Each command runs as its own ``python manage.py`` process in the stack's environment, stdout and
stderr apart, as a shell script would run it; where what a person sees matters, stderr is a
pseudo-terminal, as in an interactive shell.
"""

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time

import pytest
from django.contrib.auth import get_user_model
from kombu import Exchange, Queue
from rest_framework.test import APIClient

from switchyard.celery import app
from tests.api.conftest import VIEWER, make_user
from tests.integration.harness import ROOT, assert_operation_events_consistent
from tests.workflows import mark
from workflows_app import services
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


class Terminal:
    """The pseudo-terminal a command writes its stderr to, as an operator's shell gives it; what
    it showed so far in ``text`` (the terminal ends lines with ``\\r\\n``)."""

    #: The colours Django gives a CommandError on a terminal.
    COLOUR = re.compile(r"\x1b\[[0-9;]*m")

    def __init__(self, stack, *args):
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 160, 0, 0))  # tqdm fits its bar to the width
        self.process = subprocess.Popen([sys.executable, "manage.py", *args], cwd=ROOT, env=script_env(stack),
                                        stdout=subprocess.PIPE, stderr=slave)
        os.close(slave)
        self.fd, self.raw, self.closed = master, b"", False

    @property
    def text(self) -> str:
        return self.COLOUR.sub("", self.raw.decode(errors="replace"))

    def lines(self) -> list[str]:
        """Each line as it is left on the screen: what follows its last carriage return."""
        return [line.rsplit("\r", 1)[-1] for line in self.text.split("\r\n")]

    def read_until(self, shown, timeout=TIMEOUT):
        """Read until ``shown(text)`` is true; None: until the command closed the terminal."""
        deadline = time.monotonic() + timeout
        while not (shown(self.text) if shown else self.closed):
            assert not self.closed, f"the command ended without showing it: {self.text!r}"
            assert time.monotonic() < deadline, f"not shown in {timeout}s: {self.text[-3000:]!r}"
            if select.select([self.fd], [], [], 0.2)[0]:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:  # EIO: every writer closed it
                    chunk = b""
                self.raw += chunk
                self.closed = not chunk

    def finish(self) -> tuple[int, str]:
        """Its exit status and stdout, once it ended."""
        self.read_until(None)
        os.close(self.fd)
        out = self.process.stdout.read().decode()
        return self.process.wait(timeout=TIMEOUT), out


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
    said = failed.stderr.split(f"CommandError: execution {pk} ended failed:\n", 1)[1]
    assert said == "".join(f"  {line}\n" for line in document["error"].strip().splitlines())  # the whole error
    assert "NonRecoverableError: needs:" in said and "Traceback (most recent call last)" in said
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
    # The step runs until the test has read the first event (it waits for the tag "read-first"),
    # however long the command takes to start on a loaded machine.
    start = popen(stack, "start_execution", "it_single", "--param", f"agent={agent}", "--param", "seconds=1",
                  "--param", "after=read-first", "--wait")
    pk = start.stdout.readline().strip()  # printed before the wait: a script has the id at once
    tail = popen(stack, "tail_events", pk, "--follow", "--json")
    first = json.loads(tail.stdout.readline())
    assert first["execution_id"] == pk and first["type"] == "log"
    assert Execution.objects.get(pk=pk).status not in ("completed", "failed"), "the first event came only at the end"
    mark(None, "read-first")

    # Read on from the same buffered reader (communicate() would skip what it holds already).
    events = [first] + [json.loads(line) for line in tail.stdout]
    assert (tail.wait(timeout=TIMEOUT), tail.stderr.read()) == (0, "")
    assert events == json.loads(api_body(f"{API}/events", execution_id=pk))["results"]
    assert "workflow_completed" in [event["type"] for event in events]

    start_out, start_err = start.stdout.read(), start.stderr.read()
    assert start.wait(timeout=TIMEOUT) == 0, start_err
    assert start_out.splitlines() == ["completed: 1 of 1 operations done (succeeded=1)"]
    assert any(bar["status"] == "started" for bar in progress(start_err)), start_err


@pytest.mark.django_db(transaction=True)
def test_a_wait_on_a_workflow_that_raised_ends_with_its_whole_error(stack):
    """The exception's type and message are the traceback's last line: the reason a wait gives
    holds every line of the error, not its first ("the workflow function raised:")."""
    stack.start_manager()
    done = manage(stack, "start_execution", "it_bad_wait", "--param", "case=name", "--wait")
    assert done.returncode == 1, done.stderr
    pk, result = done.stdout.splitlines()
    error = Execution.objects.get(pk=pk).error
    assert result == "failed: 0 of 0 operations done"
    reason = done.stderr.split("CommandError: ", 1)[1].splitlines()
    assert reason == [f"execution {pk} ended failed:"] + [f"  {line}".rstrip() for line in error.strip().splitlines()]
    assert reason[1] == "  the workflow function raised:" and reason[2] == "  Traceback (most recent call last):"
    assert reason[-1].startswith("  ") and reason[-1].endswith("an event name is a string, not int (42)")


@pytest.mark.django_db(transaction=True)
def test_a_wait_for_a_step_sent_to_an_agent_that_never_came_warns_once_and_ends_cleanly(stack):
    """What an operator sees on a terminal: the warning once, on its own line above the bar; the
    bar left drawn when the wait ends, and what follows on lines of its own; stdout (a file) one
    JSON document. The API's document of the execution has the warning meanwhile."""
    stack.start_manager()
    nowhere = stack.agent_name("nowhere")  # no agent of that name runs, nor ever ran
    message = f"step 'long' waits for agent '{nowhere}', which has never been seen"
    terminal = Terminal(stack, "start_execution", "it_single", "--param", f"agent={nowhere}", "--wait", "--json")
    try:
        terminal.read_until(lambda text: "warning:" in text)
        pk = Execution.objects.get(workflow_id="it_single").pk
        document = json.loads(api_body(f"{API}/executions/{pk}"))
        assert document["warnings"] == [{"code": "unknown_agent", "step": "long", "message": message}]
        time.sleep(1)  # a few more looks at it, which show the warning no more
        services.force_cancel(pk)
        status, out = terminal.finish()
    finally:
        with app.connection_for_write() as broker:  # the step's message, which nothing will take
            Queue(nowhere, Exchange(nowhere, "direct"), routing_key=nowhere, channel=broker.default_channel).delete()

    assert status == 1
    assert json.loads(out)["status"] == "cancelled" and out.endswith("}\n") and out.count("\n") == 1
    assert terminal.text.endswith("\r\n"), "the terminal's last line is ended: the prompt starts one of its own"
    lines = terminal.lines()
    assert lines.count(f"warning: {message}") == 1 and terminal.text.count("warning:") == 1, lines
    said = next(i for i, line in enumerate(lines) if line.startswith("CommandError: "))
    assert lines[said].startswith(f"CommandError: execution {pk} ended cancelled")
    assert PROGRESS.fullmatch(lines[said - 1].rstrip()), "the bar is left drawn, the error below it"
    assert lines.index(f"warning: {message}") < said - 1
