"""With no DATABASE_URL and no CELERY_BROKER_URL a process gets SQLite under var/ and an
embedded Redis it can ping; a second process reuses the same server."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workflows_app import embedded_redis

pytestmark = pytest.mark.processes  # the project's processes and their embedded Redis

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, django
django.setup()
from django.conf import settings
from django.db import connection
from switchyard.celery import app

with app.connection_for_write() as conn:
    conn.ensure_connection(max_retries=3)
    client = conn.default_channel.client
    answer = {"ping": client.ping(), "redis_pid": client.info("server")["process_id"]}
with connection.cursor() as cursor:
    cursor.execute("select 1")
print(json.dumps({**answer, "engine": settings.DATABASES["default"]["ENGINE"],
                  "db": str(settings.DATABASES["default"]["NAME"]), "broker": app.conf.broker_url}))
"""


def bare_env(var_dir):
    env = {k: v for k, v in os.environ.items()
           if k not in {"DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"}}
    env.update(SWITCHYARD_VAR_DIR=str(var_dir), DJANGO_SETTINGS_MODULE="switchyard.settings")
    return env


def probe(var_dir):
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=bare_env(var_dir),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def var_dir(tmp_path):
    path = tmp_path / "var"
    yield path
    embedded_redis.stop(path)


def test_a_bare_process_gets_sqlite_and_a_running_embedded_redis(var_dir):
    first = probe(var_dir)
    assert first["engine"] == "django.db.backends.sqlite3"
    assert first["db"] == str(var_dir.resolve() / "switchyard.sqlite3")
    assert first["broker"] == f"redis+socket://{var_dir.resolve() / 'redis.sock'}"
    assert first["ping"] is True
    assert embedded_redis.server_pid(var_dir) == first["redis_pid"]


def test_a_second_process_reuses_the_same_server(var_dir):
    first = probe(var_dir)
    second = probe(var_dir)
    assert second["ping"] is True
    assert second["redis_pid"] == first["redis_pid"]


def test_processes_starting_together_agree_on_one_server(var_dir):
    procs = [subprocess.Popen([sys.executable, "-c", PROBE], cwd=ROOT, env=bare_env(var_dir),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    answers = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        answers.append(json.loads(out.strip().splitlines()[-1]))
    assert len({a["redis_pid"] for a in answers}) == 1


def test_a_process_that_does_not_use_celery_starts_no_server(var_dir):
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=bare_env(var_dir),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not embedded_redis.ping(var_dir)


def test_a_dead_server_is_replaced(var_dir):
    first = probe(var_dir)
    assert embedded_redis.stop(var_dir)
    assert not embedded_redis.ping(var_dir)
    second = probe(var_dir)
    assert second["ping"] is True and second["redis_pid"] != first["redis_pid"]


def test_a_stop_waits_for_the_server_to_exit_unless_told_not_to_and_then_a_new_one_starts_at_once(var_dir):
    first = probe(var_dir)
    assert embedded_redis.stop(var_dir)
    assert not embedded_redis._alive(first["redis_pid"]), "waited for: its process has exited"
    second = probe(var_dir)
    # Without waiting (the standalone stack, once every process that used it is gone): no client
    # reaches it any more, and a server started right after is a new one that answers.
    assert embedded_redis.stop(var_dir, wait=False)
    assert not embedded_redis.ping(var_dir)
    third = probe(var_dir)
    assert third["ping"] is True and third["redis_pid"] not in (first["redis_pid"], second["redis_pid"])


def _pytest_run(var_dir):
    """A test run of this suite on embedded defaults (one quick test file, which uses Celery)."""
    env = {k: v for k, v in bare_env(var_dir).items() if k != "SWITCHYARD_REQUIRE"}  # CI's services are not these
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/agents/test_broker_headers.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_a_test_run_stops_the_server_it_started_and_leaves_one_it_found(var_dir):
    _pytest_run(var_dir)
    assert (var_dir / embedded_redis.LOG_NAME).exists(), "the run started the server"
    assert not embedded_redis.ping(var_dir), "and stopped it"

    running = probe(var_dir)["redis_pid"]
    _pytest_run(var_dir)
    assert embedded_redis.ping(var_dir) and embedded_redis.server_pid(var_dir) == running
