"""``manage.py standalone`` starts the local stack on embedded defaults; Ctrl-C stops all of it."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest

from switchyard import embedded_redis

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
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


@contextmanager
def standalone(env, log_path, *args):
    """``manage.py standalone *args`` in its own session; its output is printed if the test
    fails, and whatever of it is left is killed at the end."""
    log = open(log_path, "w+")
    proc = subprocess.Popen([sys.executable, "manage.py", "standalone", *args], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc, log
    except BaseException:
        log.seek(0)
        print(log.read())
        raise
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def manage(env, *args):
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_standalone_runs_the_demo_serves_admin_and_flower_and_stops_everything_on_ctrl_c(var_dir, tmp_path):
    web, flower = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"}}
    env["SWITCHYARD_VAR_DIR"] = str(var_dir)
    with standalone(env, tmp_path / "standalone.log", "--port", str(web), "--flower-port", str(flower)) as (proc, log):
        wait_for(lambda: get(f"http://127.0.0.1:{web}/admin/login/") == 200, 60, "the admin login page")
        wait_for(lambda: get(f"http://127.0.0.1:{flower}/") == 200, 60, "Flower")
        # The demo workflow runs to its end on the stack's own manager and agent.
        wait_for(lambda: "completed" in manage(env, "list_executions", "--status", "completed"), 90, "the demo to complete")
        demo_id = manage(env, "list_executions").split()[0]
        events = manage(env, "tail_events", demo_id)
        assert "workflow_completed" in events and "task_rescheduled" in events
        assert "the workflow was shown the failure of charge (StepFailed) and went on: handled" in events

        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 4
        log.seek(0)
        output = log.read()
        assert "user admin, password " in output
        password = output.split("user admin, password ", 1)[1].split()[0]
        assert (var_dir / "standalone_admin_password.txt").read_text().strip() == password

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        gone, alive = psutil.wait_procs(children, timeout=5)
        assert alive == [], f"left running: {alive}"
        assert get(f"http://127.0.0.1:{web}/admin/login/") is None
        assert not embedded_redis.ping(var_dir), "the embedded Redis it started is stopped too"


@pytest.mark.slow
def test_standalone_with_abort_on_terminate_kills_running_executions_when_stopped(var_dir, tmp_path):
    """WORKFLOWS["ABORT_ON_TERMINATE"] (Cromwell's abort-jobs-on-terminate): Ctrl-C kills every
    active execution before the stack goes away; without it they would carry on at the next start."""
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"}}
    env.update({"SWITCHYARD_VAR_DIR": str(var_dir), "SWITCHYARD_WORKFLOW_MODULES": "tests.workflows",
                "SWITCHYARD_WORKFLOWS": '{"ABORT_ON_TERMINATE": true, "KILL_GRACE_SECONDS": 1}',
                "SWITCHYARD_TEST_MARKERS": str(tmp_path)})
    with standalone(env, tmp_path / "standalone.log", "--port", str(free_port()), "--no-flower", "--no-demo") as (proc, log):
        wait_for(lambda: "Press Ctrl-C" in Path(log.name).read_text(), 60, "the stack to start")
        execution_id = manage(env, "start_execution", "it_single", "--param", "agent=local", "--param", "seconds=300",
                              "--param", "spawn=true").split()[0]
        wait_for(lambda: (tmp_path / "long").exists(), 60, "the operation to run")
        command = json.loads((tmp_path / "long").read_text().splitlines()[0])["child"]

        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        assert "ABORT_ON_TERMINATE: killed 1 active execution(s)" in Path(log.name).read_text()
        assert execution_id in manage(env, "list_executions", "--status", "cancelled")
        assert not psutil.pid_exists(command) or psutil.Process(command).status() == psutil.STATUS_ZOMBIE
