"""``manage.py standalone`` starts the local stack on embedded defaults: the terminal shows the
URLs, the admin password, Flower's login and the demo's progress and result, each process's
output goes to ``var/logs/<process>.log`` (and to the terminal with ``--verbose``), what it keeps
under ``var/`` is its owner's only, and Ctrl-C or SIGTERM leaves no process behind. The
supervisor under it reports a child that dies with the end of its log."""

import base64
import io
import http.cookiejar
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from workflows_app import embedded_redis
from workflows_app.management.supervisor import Child, Supervisor

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url, login=None):
    """The HTTP status of a GET (an error status too), or None when nothing answers; with
    ``login`` ("user:password"), sent as HTTP basic authentication."""
    headers = {} if login is None else {"Authorization": "Basic " + base64.b64encode(login.encode()).decode()}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def var_dir(tmp_path):
    yield tmp_path / "var"
    embedded_redis.stop(tmp_path / "var")


def stack_env(var_dir, **extra):
    """The environment of a stack on embedded defaults (SQLite, embedded Redis, a secret key and
    Flower's login of its own) under var_dir."""
    unset = {"DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "DJANGO_SECRET_KEY", "FLOWER_BASIC_AUTH"}
    env = {k: v for k, v in os.environ.items() if k not in unset}
    return {**env, "SWITCHYARD_VAR_DIR": str(var_dir), **extra}


@contextmanager
def standalone(env, terminal_path, *args):
    """``manage.py standalone *args`` in its own session, its terminal written to terminal_path;
    yields the process and a function that reads its terminal so far. The terminal is printed if
    the test fails; whatever of the stack is left at the end is killed."""
    terminal = open(terminal_path, "w")
    proc = subprocess.Popen([sys.executable, "manage.py", "standalone", *args], cwd=ROOT, env=env, stdout=terminal,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        yield proc, Path(terminal_path).read_text
    except BaseException:
        print(Path(terminal_path).read_text())
        raise
    finally:
        _kill_stack(proc, env["SWITCHYARD_VAR_DIR"])
        terminal.close()


def _kill_stack(proc, var_dir):
    """The standalone process and every process of its stack: the children run in sessions of
    their own, and outlive it if it was killed, so they are found by their SWITCHYARD_VAR_DIR."""
    for process in psutil.process_iter():
        try:
            if process.pid == proc.pid or process.environ().get("SWITCHYARD_VAR_DIR") == var_dir:
                process.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    proc.wait()


def process_tree(pid):
    return [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]


def admin_page(base, password, path):
    """``path`` of the admin, as the standalone's ``admin`` user sees it (logged in through the form)."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    login = opener.open(f"{base}/admin/login/", timeout=10).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login).group(1)
    form = urllib.parse.urlencode({"username": "admin", "password": password, "csrfmiddlewaretoken": token,
                                   "next": path}).encode()
    request = urllib.request.Request(f"{base}/admin/login/", data=form, headers={"Referer": f"{base}/admin/login/"})
    return opener.open(request, timeout=10).read().decode()


def manage(env, *args):
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_standalone_shows_the_urls_and_the_demo_keeps_each_process_output_in_its_log_and_sigterm_stops_all(var_dir, tmp_path):
    web, flower = free_port(), free_port()
    env = stack_env(var_dir)
    with standalone(env, tmp_path / "terminal.txt", "--port", str(web), "--flower-port", str(flower)) as (proc, terminal):
        wait_for(lambda: "demo: completed" in terminal(), 90, "the demo to complete")
        wait_for(lambda: get(f"http://127.0.0.1:{web}/admin/login/") == 200, 60, "the admin login page")
        wait_for(lambda: get(f"http://127.0.0.1:{flower}/healthcheck") == 200, 60, "Flower")
        output = terminal()

        # What a person needs: the URLs (each one real) and the admin password, once.
        for url in (f"http://127.0.0.1:{web}/admin/", f"http://127.0.0.1:{web}/api/v1/docs", f"http://127.0.0.1:{flower}/"):
            assert url in output
        assert get(f"http://127.0.0.1:{web}/api/v1/docs") in {200, 302, 401, 403}, "the API docs asks for a login"
        assert output.count("user admin, password ") == 1
        password = output.split("user admin, password ", 1)[1].split()[0]
        assert (var_dir / "standalone_admin_password.txt").read_text().strip() == password

        # Flower asks for a login, the one it made and printed beside the admin's password.
        flower_line = re.search(rf"^  Flower    http://127\.0\.0\.1:{flower}/   user (\S+), password (\S+)$", output,
                                re.MULTILINE)
        assert flower_line, output
        flower_login = f"{flower_line.group(1)}:{flower_line.group(2)}"
        assert flower_line.group(2) != password
        assert get(f"http://127.0.0.1:{flower}/") == 401
        assert get(f"http://127.0.0.1:{flower}/", login=f"{flower_line.group(1)}:wrong") == 401
        assert get(f"http://127.0.0.1:{flower}/", login=flower_login) == 200
        assert (var_dir / "standalone_flower_login.txt").read_text().strip() == flower_login
        assert flower_line.group(2) not in " ".join(" ".join(p.cmdline()) for p in process_tree(proc.pid)), \
            "the password is in Flower's environment, not on a command line anyone can list"

        # The demo's progress as it changes, then its end and result.
        assert re.search(r"^demo: \d+/\d+ operations done", output, re.MULTILINE), output
        result = re.search(r"^demo: completed in [\d.]+s, result (.*)$", output, re.MULTILINE)
        assert result and json.loads(result.group(1))["payment"] == "refunded 42"
        demo_id = re.search(r"demo workflow started: execution (\S+)", output).group(1)
        events = manage(env, "tail_events", demo_id)
        assert "workflow_completed" in events and "task_rescheduled" in events
        assert "the workflow was shown the failure of charge (StepFailed) and went on: handled" in events

        # The admin's operation rows link to this stack's Flower.
        page = admin_page(f"http://127.0.0.1:{web}", password, f"/admin/workflows_app/execution/{demo_id}/change/")
        assert f'href="http://127.0.0.1:{flower}/task/' in page

        # Each process's chatter is in its own log, not on the terminal.
        logs = {name: (var_dir / "logs" / f"{name}.log").read_text() for name in ("web", "manager", "agent", "flower")}
        for chatter in ("Starting development server", "[tasks]", "-------------- ", "Task agents.run_operation",
                        "succeeded in", "Visit me at", "SecurityWarning"):
            assert chatter not in output, f"{chatter!r} on the terminal"
        assert "Starting development server" in logs["web"] and "GET /admin/login/" in logs["web"]
        assert "[tasks]" in logs["manager"] and re.search(r"manager-\w+@\S+ ready", logs["manager"])
        assert "[tasks]" in logs["agent"] and re.search(r"local@\S+ ready", logs["agent"])
        assert re.search(r"Task demo › fan-0 \(add\)\[\S+\] succeeded", logs["agent"])
        assert "Visit me at" in logs["flower"]

        # What it keeps under var/ is its owner's only: the database, the embedded Redis, the
        # secret key, the passwords, the logs, Flower's history. (An agent's records of what
        # runs lie in owner-only directories.)
        made = [var_dir, *var_dir.rglob("*")]
        assert {"switchyard.sqlite3", "secret_key", "redis.sock", "redis.log", "logs", "flower.log"} <= {p.name for p in made}
        assert any(p.name.startswith("flower.db") for p in made)
        loose = {str(p.relative_to(var_dir)): oct(p.lstat().st_mode & 0o777) for p in made
                 if p.lstat().st_mode & 0o077 and not (p.is_file() and "agents" in p.relative_to(var_dir).parts)}
        assert loose == {}

        tree = process_tree(proc.pid)
        assert len(tree) >= 5, "standalone and its four processes"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        gone, alive = psutil.wait_procs(tree, timeout=5)
        assert alive == [], f"left running: {alive}"
        assert get(f"http://127.0.0.1:{web}/admin/login/") is None
        assert not embedded_redis.ping(var_dir), "the embedded Redis it started is stopped too"
        assert terminal().rstrip().endswith("embedded Redis stopped")


def test_standalone_verbose_shows_every_process_output_on_the_terminal_and_ctrl_c_stops_all(var_dir, tmp_path):
    env = stack_env(var_dir)
    with standalone(env, tmp_path / "terminal.txt", "--port", str(free_port()), "--no-flower", "--no-demo",
                    "--verbose") as (proc, terminal):
        wait_for(lambda: re.search(r"^agent +\| .*local@\S+ ready", terminal(), re.MULTILINE), 60,
                 "the agent's own output on the terminal")
        wait_for(lambda: re.search(r"^manager +\| .*manager-\w+@\S+ ready", terminal(), re.MULTILINE), 60,
                 "the manager's own output on the terminal")
        assert re.search(r"^web +\| Starting development server", terminal(), re.MULTILINE)
        assert re.search(r"local@\S+ ready", (var_dir / "logs" / "agent.log").read_text()), "and in its log"

        tree = process_tree(proc.pid)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        gone, alive = psutil.wait_procs(tree, timeout=5)
        assert alive == [], f"left running: {alive}"


def test_a_child_that_exits_is_reported_with_the_end_of_its_log_and_the_others_are_stopped(tmp_path):
    """Its warnings and errors reach the terminal as they are written (with their traceback),
    its other lines only its log; when it exits, the end of its log is shown."""
    script = "; ".join([
        "import sys, time",
        "print('chatter of no interest')",
        "print('2026-01-01 10:00:00,000 WARNING flower.inspector Inspect method stats failed')",
        "print('[2026-01-01 10:00:00,000: ERROR/MainProcess] it broke')",
        "print('Traceback (most recent call last):')",
        "print('ValueError: bad value')",
        "print('[2026-01-01 10:00:00,001: INFO/MainProcess] carrying on')",
        "sys.stdout.flush()",
        "time.sleep(1)",
        "print('last words')",
        "sys.exit(3)",
    ])
    out = io.StringIO()
    supervisor = Supervisor([Child("crasher", [sys.executable, "-c", script]),
                             Child("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"])],
                            log_dir=tmp_path / "logs", out=out, grace=5)
    supervisor.start()
    sleeper = supervisor.children[1].process
    assert supervisor.wait() == 1
    relayed, exited, tail = out.getvalue().partition("crasher exited with status 3")
    assert exited, out.getvalue()
    assert re.search(r"^crasher +\| \[2026-01-01 10:00:00,000: ERROR/MainProcess\] it broke\n"
                     r"crasher +\| Traceback \(most recent call last\):\n"
                     r"crasher +\| ValueError: bad value\n", relayed, re.MULTILINE), relayed
    for quiet in ("chatter of no interest", "carrying on", "Inspect method stats failed", "last words"):
        assert quiet not in relayed
    assert "chatter of no interest" in tail and "last words" in tail
    assert sleeper.poll() is not None, "the other children are stopped"
    assert "last words" in (tmp_path / "logs" / "crasher.log").read_text()


@pytest.mark.slow
def test_standalone_with_abort_on_terminate_kills_running_executions_when_stopped(var_dir, tmp_path):
    """WORKFLOWS["ABORT_ON_TERMINATE"] (Cromwell's abort-jobs-on-terminate): Ctrl-C kills every
    active execution before the stack goes away; without it they would carry on at the next start."""
    env = stack_env(var_dir, SWITCHYARD_WORKFLOW_MODULES="tests.workflows",
                    SWITCHYARD_WORKFLOWS='{"ABORT_ON_TERMINATE": true, "KILL_GRACE_SECONDS": 1}',
                    SWITCHYARD_TEST_MARKERS=str(tmp_path))
    with standalone(env, tmp_path / "terminal.txt", "--port", str(free_port()), "--no-flower", "--no-demo") as (proc, terminal):
        wait_for(lambda: "Press Ctrl-C" in terminal(), 60, "the stack to start")
        execution_id = manage(env, "start_execution", "it_single", "--param", "agent=local", "--param", "seconds=300",
                              "--param", "spawn=true").split()[0]
        wait_for(lambda: (tmp_path / "long").exists(), 60, "the operation to run")
        command = json.loads((tmp_path / "long").read_text().splitlines()[0])["child"]

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        assert "ABORT_ON_TERMINATE: killed 1 active execution(s)" in terminal()
        assert execution_id in manage(env, "list_executions", "--status", "cancelled")
        assert not psutil.pid_exists(command) or psutil.Process(command).status() == psutil.STATUS_ZOMBIE
