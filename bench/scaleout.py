"""Scale-out and database cost (issue 19, "also measure"; no target).

1. A second manager and a second agent on the same machine: the fan-out with one manager and one
   agent, then with two of each, in the same run. The work is two executions of ``bench_fan_out``
   of N/2 no-ops each, started together, timed until both are ``completed``: with one agent both
   send to it; with two, one to each (an agent is a queue, and an execution's steps name one).
   Every manager consumes the management queue, so with two of them each execution may be run by
   either. While it runs a thread samples, every ``SAMPLE`` seconds, the database's other
   backends (``pg_stat_activity``): how many are active, how many wait for a heavyweight lock
   (``wait_event_type = 'Lock'``: a row, a transaction id, a relation) and on what, and how many
   locks are not granted (``pg_locks``).
2. Commits and round trips per operation, for the fan-out, fan-in and chain cases (one manager,
   one agent):
   - commits: the database's ``xact_commit`` (``pg_stat_database``) across the case — every
     transaction the server committed, an autocommitted statement being one — from every process;
   - statements: every ``execute``/``executemany`` of every Switchyard process (the managers,
     the agents and their pool processes), counted by a Django execute wrapper that this module
     installs in each connection of the processes it starts (they load it as a workflow module,
     and it counts only when ``STATEMENTS_DIR_ENV`` names a directory: each process writes its
     counts there, to a file named by its pid, twice a second);
   - round trips, counted by the same wrapper: a statement is one, except in psycopg's pipeline
     mode (``workflows_app.db.Transaction``), where a batch of statements is one; a statement
     that opens a Django transaction (``atomic``) takes two more, its ``BEGIN`` (psycopg sends it
     on its own) and its ``COMMIT``.
   The benchmark's own polling is counted by the same wrapper in its process and left out. The
   processes' idle background (the managers' tick, the agents' heartbeats) is measured in a quiet
   window first and its rate subtracted. PostgreSQL publishes a backend's counts when it has been
   idle (within ``STATS_SETTLE`` seconds), so each reading waits that long first.

PostgreSQL only (it reads PostgreSQL's statistics views). It stops the benchmark's own manager
and agent first (each configuration has exactly the processes it names), and what it started at
the end: run it last.
"""

import os
import statistics
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from django.db import connection, connections
from django.db.backends.signals import connection_created
from psycopg.pq import TransactionStatus

from bench.throughput import DEFAULT_SIZES, POLL, TIMEOUT
from tests.integration.harness import NO_DATABASE_URL
from workflows_app import services
from workflows_app.models import Execution

STATEMENTS_DIR_ENV = "SWITCHYARD_BENCH_STATEMENTS_DIR"
MODULES = "bench.workflows,bench.scaleout"
SAMPLE = 0.05
STATS_SETTLE = 11.0
FLUSH = 0.5


# --- counting statements (in every process this module is loaded in, when asked) ---------

class StatementCounter:
    """Counts the statements of one process and the round trips they took; written to
    ``<dir>/<pid>`` every ``FLUSH`` seconds by a daemon thread.

    A statement is a round trip of its own, except in psycopg's pipeline mode (``db.Transaction``),
    where a batch of statements is one. A statement that opens a transaction of Django's
    (``atomic``: not in autocommit, no transaction open yet) takes two more: psycopg sends ``BEGIN``
    on its own before it, and the ``COMMIT`` (or ``ROLLBACK``) that ends it is one."""

    def __init__(self, directory):
        self.directory = Path(directory) if directory else None
        self.statements = 0
        self.round_trips = 0
        self.pid = None
        self._pipeline = None

    def __call__(self, execute, sql, params, many, context):
        raw = context["connection"].connection
        self.statements += 1
        pipeline = getattr(raw, "_pipeline", None)  # psycopg's open pipeline: it has no public accessor
        if pipeline is not None:
            if pipeline is not self._pipeline:  # the first statement of a batch
                self.round_trips += 1
            self._pipeline = pipeline
        else:
            self._pipeline = None
            self.round_trips += 1
            if not context["connection"].get_autocommit() and raw.info.transaction_status == TransactionStatus.IDLE:
                self.round_trips += 2
        return execute(sql, params, many, context)

    def install(self, sender, connection, **kwargs):
        if self not in connection.execute_wrappers:
            connection.execute_wrappers.append(self)
        if self.directory and self.pid != os.getpid():  # the first connection of a (forked) process
            self.pid = os.getpid()
            self.statements = self.round_trips = 0
            threading.Thread(target=self._flush_forever, daemon=True, name="bench-statements").start()

    def _flush_forever(self):
        path, pid = self.directory / str(os.getpid()), os.getpid()
        while pid == os.getpid():
            tmp = path.with_suffix(".tmp")
            tmp.write_text(f"{self.statements} {self.round_trips}")
            os.replace(tmp, path)
            time.sleep(FLUSH)


if os.environ.get(STATEMENTS_DIR_ENV):
    _counter = StatementCounter(os.environ[STATEMENTS_DIR_ENV])
    connection_created.connect(_counter.install, weak=False, dispatch_uid="bench-statements")


def _read_statements(directory) -> tuple[int, int]:
    """Statements and round trips of every counting process, as last written."""
    statements = round_trips = 0
    for path in Path(directory).iterdir():
        if path.suffix == ".tmp":
            continue
        try:
            counted, trips = path.read_text().split()
        except (OSError, ValueError):
            continue
        statements, round_trips = statements + int(counted), round_trips + int(trips)
    return statements, round_trips


# --- the database's own counts and its lock waits ---------------------------------------------

def _commits() -> tuple[int, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()


class LockSampler(threading.Thread):
    """Samples the other backends of the database until stopped (its own connection)."""

    def __init__(self):
        super().__init__(daemon=True, name="bench-lock-sampler")
        self.stopped = threading.Event()
        self.samples = 0
        self.with_lock_wait = 0
        self.waiting = []  # backends waiting for a lock, per sample
        self.active = []  # active backends, per sample
        self.not_granted = []  # pg_locks not granted, per sample
        self.wait_events = Counter()  # "Lock:transactionid" -> backend-samples
        self.error = None

    def run(self):
        try:
            with connection.cursor() as cursor:
                while not self.stopped.is_set():
                    cursor.execute("""
                        SELECT state, wait_event_type, wait_event FROM pg_stat_activity
                        WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
                    """)
                    rows = cursor.fetchall()
                    cursor.execute("""
                        SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
                        WHERE NOT l.granted AND a.datname = current_database()
                    """)
                    not_granted = cursor.fetchone()[0]
                    waiting = 0
                    for state, kind, event in rows:
                        if kind and state == "active":
                            self.wait_events[f"{kind}:{event}"] += 1
                        waiting += kind == "Lock"
                    self.samples += 1
                    self.with_lock_wait += waiting > 0
                    self.waiting.append(waiting)
                    self.active.append(sum(state == "active" for state, _, _ in rows))
                    self.not_granted.append(not_granted)
                    time.sleep(SAMPLE)
        except Exception as exc:  # reported with the results rather than lost in a thread
            self.error = exc
        finally:
            connections.close_all()

    def stop(self):
        self.stopped.set()
        self.join()
        if self.error:
            raise self.error


# --- the cases ------------------------------------------------------------------------

@dataclass
class Config:
    label: str
    managers: int
    agents: int
    seconds: list = field(default_factory=list)
    samplers: list = field(default_factory=list)


@dataclass
class Cost:
    case: str
    operations: int
    commits: float = 0.0
    rollbacks: float = 0.0
    statements: float = 0.0
    round_trips: float = 0.0


@dataclass
class Result:
    configs: list
    costs: list
    n: int


def _start(stack, managers, agents, tag, statements_dir):
    """Start ``managers`` managers and ``agents`` agents that count their statements; the
    processes and the agents' names, once every agent is online."""
    env = {"SWITCHYARD_WORKFLOW_MODULES": MODULES, STATEMENTS_DIR_ENV: str(statements_dir)}
    processes, names = [], []
    for i in range(1, managers + 1):
        processes.append(stack.start(f"scale-manager-{tag}-{i}", [
            "manage.py", "run_manager", "--loglevel", "INFO", "--concurrency", "2"], env=env))
    for i in range(1, agents + 1):
        name = stack.agent_name(f"scale-agent-{tag}-{i}")
        processes.append(stack.start(name, ["manage.py", "run_agent", name, "--concurrency", "2", "--loglevel", "INFO"],
                                     env={**env, "DATABASE_URL": NO_DATABASE_URL}))
        names.append(name)
    for name in names:
        stack.wait_for_agent(name)
    return processes, names


def _wait_all_completed(ids):
    began = time.monotonic()
    while True:
        statuses = dict(Execution.objects.filter(pk__in=ids).values_list("id", "status"))
        if all(status == "completed" for status in statuses.values()):
            return time.monotonic()
        ended = {status for status in statuses.values() if status in ("failed", "cancelled", "timed_out")}
        if ended:
            raise RuntimeError(f"benchmark executions ended {ended}")
        if time.monotonic() - began > TIMEOUT:
            raise TimeoutError(f"benchmark executions still {statuses} after {TIMEOUT} s")
        time.sleep(max(POLL, min(0.05, (time.monotonic() - began) / 100)))


def _split_fan_out(n, agents):
    """Two executions of n/2 no-ops, one per agent (both to the one agent when there is one),
    started together; the seconds until both are completed."""
    asked = time.monotonic()
    ids = [services.start("bench_fan_out", {"n": n // 2, "agent": agents[i % len(agents)]}).pk for i in range(2)]
    return _wait_all_completed(ids) - asked


def _single(workflow, parameters):
    asked = time.monotonic()
    execution_id = services.start(workflow, parameters).pk
    return _wait_all_completed([execution_id]) - asked


class _Meter:
    """Commits (the server's) and statements (every counting process's, less this one's) over a
    window, less the idle background's rate."""

    def __init__(self, statements_dir):
        self.statements_dir = statements_dir
        self.own = StatementCounter(None)
        connection.ensure_connection()
        self.own.install(None, connection)
        self.idle = (0.0, 0.0, 0.0, 0.0)  # per second: commits, rollbacks, statements, round trips

    def read(self):
        time.sleep(STATS_SETTLE)
        commits, rollbacks = _commits()
        statements, round_trips = _read_statements(self.statements_dir)
        return time.monotonic(), commits, rollbacks, statements, round_trips, self.own.statements

    def delta(self, start, end):
        seconds = end[0] - start[0]
        own = end[5] - start[5]  # this process's statements: autocommitted, each a commit
        commits = end[1] - start[1] - own - self.idle[0] * seconds
        rollbacks = end[2] - start[2] - self.idle[1] * seconds
        statements = end[3] - start[3] - self.idle[2] * seconds
        round_trips = end[4] - start[4] - self.idle[3] * seconds
        return commits, rollbacks, statements, round_trips

    def measure_idle(self, start):
        """The background's rates, from ``start`` to a new reading (returned)."""
        end = self.read()
        seconds = end[0] - start[0]
        self.idle = tuple(value / seconds for value in self.delta(start, end))
        return end


def run(stack, processes, rounds, sizes=None) -> Result:
    """``processes``: the benchmark's own manager and agent, stopped first. Each round runs each
    configuration in turn, with processes started for it (a machine's load drifts: rounds side by
    side compare better than one configuration's rounds after the other's); the costs are
    measured in the first round, with one manager and one agent."""
    sizes = {**DEFAULT_SIZES, **(sizes or {})}
    n, m = sizes["fanout"], sizes["chain"]
    for process in processes:
        stack.stop(process)
    configs = [Config("1 manager, 1 agent", 1, 1), Config("2 managers, 2 agents", 2, 2)]
    costs = []
    for round_ in range(1, rounds + 1):
        for config in configs:
            tag = f"{config.managers}x{config.agents}-{round_}"
            statements_dir = stack.base_dir / f"statements-{tag}"
            statements_dir.mkdir()
            started, agents = _start(stack, config.managers, config.agents, tag, statements_dir)
            try:
                _split_fan_out(4, agents)  # warm-up, untimed
                sampler = LockSampler()
                sampler.start()
                try:
                    config.seconds.append(_split_fan_out(n, agents))
                finally:
                    sampler.stop()
                config.samplers.append(sampler)
                print(f"round {round_}: scale-out fan-out of {n}, {config.label}: {config.seconds[-1]:.3f} s; "
                      f"{_waits(sampler)}", file=sys.stderr, flush=True)
                if round_ == 1 and config.managers == 1:
                    costs = _costs(statements_dir, agents[0], n, m)
            finally:
                for process in started:
                    stack.stop(process)
    return Result(configs, costs, n)


def _costs(statements_dir, agent, n, m):
    """Each case's cost per operation. The readings follow each other: the first window is idle,
    and each case's window starts where the one before ended."""
    meter = _Meter(statements_dir)
    cases = [(Cost(f"fan-out: {n} no-ops", n), "bench_fan_out", {"n": n, "agent": agent}),
             (Cost(f"fan-in: {n} no-ops then a join", n + 1), "bench_fan_in", {"n": n, "agent": agent}),
             (Cost(f"chain: {m} sequential no-ops", m), "bench_chain", {"m": m, "agent": agent})]
    try:
        reading = meter.read()
        reading = meter.measure_idle(reading)
        for cost, workflow, parameters in cases:
            reading = _measure(meter, reading, cost, workflow, parameters)
    finally:
        connection.execute_wrappers.remove(meter.own)
    return [cost for cost, _, _ in cases]


def _measure(meter, start, cost, workflow, parameters):
    _single(workflow, parameters)
    end = meter.read()
    commits, rollbacks, statements, round_trips = meter.delta(start, end)
    cost.commits, cost.rollbacks = commits / cost.operations, rollbacks / cost.operations
    cost.statements, cost.round_trips = statements / cost.operations, round_trips / cost.operations
    print(f"{cost.case}: {cost.commits:.2f} commits, {cost.statements:.2f} statements, "
          f"{cost.round_trips:.2f} round trips per operation (in all: {commits:.0f} commits, {rollbacks:.0f} "
          f"rollbacks, {statements:.0f} statements, {round_trips:.0f} round trips)", file=sys.stderr, flush=True)
    return end


def _waits(sampler) -> str:
    if not sampler.samples:
        return "no samples"
    return (f"{sampler.samples} samples, {100 * sampler.with_lock_wait / sampler.samples:.0f}% with a lock wait, "
            f"at most {max(sampler.waiting)} waiting, mean {statistics.mean(sampler.active):.1f} active")


def report(result) -> str:
    lines = [f"| scale-out: fan-out of {result.n} no-ops as 2 executions of {result.n // 2} | median (s) | "
             "samples with a backend waiting for a lock | backends waiting for a lock (mean / max) | "
             "locks not granted (max) | active backends (mean) | top waits of active backends |",
             "|---|---|---|---|---|---|---|"]
    for config in result.configs:
        samplers = config.samplers
        samples = sum(s.samples for s in samplers) or 1
        waiting = [w for s in samplers for w in s.waiting] or [0]
        active = [a for s in samplers for a in s.active] or [0]
        not_granted = [g for s in samplers for g in s.not_granted] or [0]
        events = sum((s.wait_events for s in samplers), Counter())
        top = ", ".join(f"{event} {100 * count / samples:.0f}%" for event, count in events.most_common(4))
        lines.append(f"| {config.label} | {statistics.median(config.seconds):.3f} | "
                     f"{100 * sum(s.with_lock_wait for s in samplers) / samples:.1f}% of {samples} | "
                     f"{statistics.mean(waiting):.2f} / {max(waiting)} | {max(not_granted)} | "
                     f"{statistics.mean(active):.1f} | {top or 'none'} |")
    if len(result.configs) == 2 and all(c.seconds for c in result.configs):
        one, two = (statistics.median(c.seconds) for c in result.configs)
        lines.append(f"\nTwo of each against one of each: {two / one:.2f} (time; below 1 is faster).")
    lines += ["", "| database cost per operation (1 manager, 1 agent) | commits | rollbacks | statements | round trips |",
              "|---|---|---|---|---|"]
    for cost in result.costs:
        lines.append(f"| {cost.case} | {cost.commits:.2f} | {cost.rollbacks:.2f} | {cost.statements:.2f} | "
                     f"{cost.round_trips:.2f} |")
    return "\n".join(lines)
