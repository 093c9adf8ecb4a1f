"""``manage.py standalone`` starts the local stack on embedded defaults; Ctrl-C stops all of it."""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
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


def manage(env, *args):
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_standalone_runs_the_demo_serves_admin_and_flower_and_stops_everything_on_ctrl_c(var_dir, tmp_path):
    web, flower = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"}}
    env["SWITCHYARD_VAR_DIR"] = str(var_dir)
    log = open(tmp_path / "standalone.log", "w+")
    proc = subprocess.Popen([sys.executable, "manage.py", "standalone", "--port", str(web), "--flower-port", str(flower)],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: get(f"http://127.0.0.1:{web}/admin/login/") == 200, 60, "the admin login page")
        wait_for(lambda: get(f"http://127.0.0.1:{flower}/") == 200, 60, "Flower")
        # The demo workflow runs to its end on the stack's own manager and agent.
        wait_for(lambda: "completed" in manage(env, "list_executions", "--status", "completed"), 90, "the demo to complete")
        demo_id = manage(env, "list_executions").split()[0]
        events = manage(env, "tail_events", demo_id)
        assert "workflow_completed" in events and "task_rescheduled" in events

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
    except BaseException:
        log.seek(0)
        print(log.read())
        raise
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
