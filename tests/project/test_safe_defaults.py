"""Safe defaults: ``DEBUG`` off unless ``DJANGO_DEBUG`` says so; no secret key in the
code, but one of the installation's own made once under ``var/``; what Switchyard keeps under
``var/`` (the database, the embedded Redis, Flower's history, logs, the agent's records) readable
by its owner only; Flower not started without a login.

The demo project's settings are read in fresh processes with a clean environment (no
``DJANGO_DEBUG``, no ``DJANGO_SECRET_KEY``), as a person starting it for the first time has, and
under the usual umask 0o022, which would leave every file world-readable.
"""

import io
import json
import os
import shelve
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agents.worker import local
from workflows_app import embedded_redis, local_files
from workflows_app.management.commands import run_flower
from workflows_app.management.supervisor import Child, Supervisor

pytestmark = pytest.mark.processes  # the project's commands

ROOT = Path(__file__).resolve().parents[2]
USUAL_UMASK = 0o022
BROKER_PASSWORD = "broker-password-not-to-show"

#: Reads the demo project's settings, asks for a page with a Host header it does not serve, and
#: writes to its SQLite database; prints what it saw, with the modes of what is under var/
#: while the database is open (SQLite's -wal and -shm exist only then).
PROBE = """
import json, django
django.setup()
from django.conf import settings
from django.db import connection
from django.test import Client


response = Client().get("/admin/", HTTP_HOST="attacker.example")
with connection.cursor() as cursor:
    cursor.execute("create table if not exists probe (x integer)")
    cursor.execute("insert into probe values (1)")
    var = settings.VAR_DIR
    modes = {str(p.relative_to(var)): p.stat().st_mode & 0o777 for p in [var, *var.rglob("*")]}
print(json.dumps({"debug": settings.DEBUG, "secret_key": settings.SECRET_KEY, "status": response.status_code,
                  "body": response.content.decode(errors="replace"), "db": str(settings.DATABASES["default"]["NAME"]),
                  "modes": modes}))
"""


def clean_env(var_dir, **extra):
    """A first start's environment: nothing of Switchyard's or Django's set but where var/ is,
    and a broker URL with a password (a database on SQLite under var/)."""
    env = {name: os.environ[name] for name in ("PATH", "HOME", "LANG") if name in os.environ}
    return {**env, "DJANGO_SETTINGS_MODULE": "switchyard.settings", "SWITCHYARD_VAR_DIR": str(var_dir),
            "CELERY_BROKER_URL": f"redis://:{BROKER_PASSWORD}@127.0.0.1:9/0", **extra}


def probe(var_dir, **extra):
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=clean_env(var_dir, **extra),
                          capture_output=True, text=True, timeout=120, umask=USUAL_UMASK)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def not_owner_only(root) -> dict:
    """What under ``root`` (itself included) a group or others may use: path -> mode."""
    root = Path(root)
    return {str(p.relative_to(root)): oct(p.lstat().st_mode & 0o777)
            for p in [root, *root.rglob("*")] if p.lstat().st_mode & 0o077 and not p.is_symlink()}


@pytest.fixture
def usual_umask():
    """This process under the umask most machines give a user, put back afterwards."""
    previous = os.umask(USUAL_UMASK)
    yield
    os.umask(previous)


# --- DEBUG ---------------------------------------------------------------------------------

def test_debug_is_off_without_django_debug_and_an_error_page_shows_no_secret(tmp_path):
    seen = probe(tmp_path / "var")
    assert seen["debug"] is False
    # A Host header the project does not serve, without a login: a plain 400, not Django's
    # debug page with the settings (the broker's URL and its password) in it.
    assert seen["status"] == 400
    assert BROKER_PASSWORD not in seen["body"] and "CELERY_BROKER_URL" not in seen["body"]
    # Asked for, it is on.
    assert probe(tmp_path / "var", DJANGO_DEBUG="1")["debug"] is True


# --- SECRET_KEY ----------------------------------------------------------------------------

def test_the_secret_key_is_made_once_under_var_owner_only_and_read_on_later_starts(tmp_path):
    first = probe(tmp_path / "var")
    key_file = tmp_path / "var" / "secret_key"
    assert key_file.read_text().strip() == first["secret_key"]
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert len(first["secret_key"]) >= 50
    # The next start reads it (sessions and signed values outlive a restart) ...
    assert probe(tmp_path / "var")["secret_key"] == first["secret_key"]
    # ... another installation has its own, and no key is written in the code.
    assert probe(tmp_path / "other-var")["secret_key"] != first["secret_key"]
    for source in (ROOT / "switchyard").rglob("*.py"):
        assert first["secret_key"] not in source.read_text()
    # DJANGO_SECRET_KEY, when set, is the key, and none is made.
    seen = probe(tmp_path / "env-var", DJANGO_SECRET_KEY="the-environment-s-own-key")
    assert seen["secret_key"] == "the-environment-s-own-key"
    assert not (tmp_path / "env-var" / "secret_key").exists()


def test_processes_starting_together_agree_on_one_secret_key(tmp_path):
    code = f"from workflows_app.local_files import secret_key; print(secret_key({str(tmp_path / 'var')!r}))"
    processes = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
                 for _ in range(6)]
    keys = {process.communicate(timeout=60)[0].strip() for process in processes}
    assert len(keys) == 1 and "" not in keys
    assert [p.name for p in (tmp_path / "var").iterdir()] == ["secret_key"], "no draft left behind"


# --- Owner-only files -----------------------------------------------------------------------

def test_the_var_dir_and_the_sqlite_database_with_its_wal_and_shm_are_owner_only(tmp_path):
    seen = probe(tmp_path / "var")
    assert seen["db"] == str((tmp_path / "var").resolve() / "switchyard.sqlite3")
    assert {"switchyard.sqlite3", "switchyard.sqlite3-wal", "switchyard.sqlite3-shm"} <= set(seen["modes"])
    assert seen["modes"]["."] == 0o700
    assert {name: oct(mode) for name, mode in seen["modes"].items() if mode & 0o077} == {}


def test_every_directory_switchyard_creates_on_the_way_to_var_is_owner_only(tmp_path, usual_umask):
    made = local_files.private_dir(tmp_path / "a" / "b" / "var")
    assert made.is_dir() and not_owner_only(tmp_path / "a") == {}


@pytest.fixture
def redis_var_dir(tmp_path):
    yield tmp_path / "redis-var"
    embedded_redis.stop(tmp_path / "redis-var")


def test_the_embedded_redis_keeps_its_socket_pid_log_and_data_owner_only(redis_var_dir, usual_umask):
    embedded_redis.ensure_running(redis_var_dir)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:  # a message kept on disk
        sock.connect(str(embedded_redis.socket_path(redis_var_dir)))
        sock.sendall(b"SET probe 1\r\n")
        assert sock.recv(64).startswith(b"+OK")
    names = {p.name for p in redis_var_dir.rglob("*")}
    # The append-only file is appendonly.aof (Redis 6) or a directory, appendonlydir (Redis 7).
    assert {"redis.sock", "redis.pid", "redis.log", "redis.lock"} <= names, names
    assert any(name.startswith("appendonly") for name in names), names
    assert not_owner_only(redis_var_dir) == {}


def test_the_agents_records_of_what_runs_are_in_owner_only_directories(tmp_path, monkeypatch, usual_umask):
    monkeypatch.setenv("SWITCHYARD_VAR_DIR", str(tmp_path / "var"))
    directory = local.running_dir("probe-agent")
    assert directory.is_dir() and not_owner_only(tmp_path / "var") == {}


def test_standalones_process_logs_are_owner_only(tmp_path, usual_umask):
    log_dir = tmp_path / "var" / "logs"
    local_files.private_dir(tmp_path / "var")
    supervisor = Supervisor([Child("probe", [sys.executable, "-c", "print('a line that names a secret')"])],
                            log_dir=log_dir, out=io.StringIO(), grace=5, tick=0.05)
    supervisor.start()
    supervisor.wait()
    assert "a line that names a secret" in (log_dir / "probe.log").read_text()
    assert not_owner_only(tmp_path / "var") == {}


# --- Flower asks for a login ---------------------------------------------------------------

class FakeFlower:
    """Stands for Celery's ``flower`` command: records its argv and, as Flower does, keeps its
    history with Python's ``shelve`` at ``--db``."""

    def __init__(self):
        self.argv = None

    def start(self, argv):
        self.argv = argv
        db = next(arg.split("=", 1)[1] for arg in argv if arg.startswith("--db="))
        with shelve.open(db, flag="n") as state:
            state["events"] = []


@pytest.fixture
def fake_flower(monkeypatch, tmp_path):
    monkeypatch.setenv("SWITCHYARD_VAR_DIR", str(tmp_path / "var"))
    monkeypatch.delenv("FLOWER_BASIC_AUTH", raising=False)
    flower = FakeFlower()
    monkeypatch.setattr(run_flower, "current_app", flower)
    return flower


def test_run_flower_refuses_to_start_without_a_login(fake_flower):
    with pytest.raises(CommandError, match=r"^Flower needs a login: set FLOWER_BASIC_AUTH=user:password "):
        call_command("run_flower")
    assert fake_flower.argv is None


@pytest.mark.parametrize("value", ["watcher", "watcher:", ":password", "watcher:password,other"])
def test_run_flower_refuses_a_login_that_is_not_user_and_password(fake_flower, monkeypatch, value):
    monkeypatch.setenv("FLOWER_BASIC_AUTH", value)
    with pytest.raises(CommandError, match="FLOWER_BASIC_AUTH must be user:password"):
        call_command("run_flower")
    assert fake_flower.argv is None


def test_run_flower_with_a_login_leaves_it_to_flower_and_off_the_command_line(fake_flower, monkeypatch, tmp_path,
                                                                                usual_umask):
    monkeypatch.setenv("FLOWER_BASIC_AUTH", "watcher:s3cret-password,other:another-password")
    call_command("run_flower", "--port=5999")
    assert fake_flower.argv[0] == "flower" and "--port=5999" in fake_flower.argv
    assert not any("s3cret-password" in arg for arg in fake_flower.argv)
    # Its history is its owner's only, and the umask is this process's own again afterwards.
    assert any(p.name.startswith("flower.db") for p in (tmp_path / "var").iterdir())
    assert not_owner_only(tmp_path / "var") == {}
    assert os.umask(USUAL_UMASK) == USUAL_UMASK


def test_run_flower_no_auth_starts_without_a_login(fake_flower):
    call_command("run_flower", "--no-auth")
    assert fake_flower.argv is not None


def test_manage_py_run_flower_without_a_login_exits_with_one_line_that_says_how(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "FLOWER_BASIC_AUTH" and not k.startswith("PYTEST_")}
    with socket.socket() as sock:  # should it start after all, on a port nobody else uses
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    done = subprocess.run([sys.executable, "manage.py", "run_flower", f"--port={port}"], cwd=ROOT,
                          env={**env, "SWITCHYARD_VAR_DIR": str(tmp_path / "var")},
                          capture_output=True, text=True, timeout=90)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "CommandError: Flower needs a login: set FLOWER_BASIC_AUTH=user:password "
        "(or give --no-auth when something in front of it asks for one)"], done.stderr
