"""A soak with chaos: what a user relies on when processes die, the broker
restarts and the database restarts, all while hundreds of executions run.

Two managers and two agents, on a PostgreSQL cluster and a Redis server of the test's own, run
500 executions of mixed shapes — graphs, Celery canvases (chain, group, chord), imperative
steps, waits on an event the test sends, operations that fail once retryably, and a few that
the test cancels or kills — while a chaos loop SIGKILLs a random manager or agent every few
seconds and starts it again, and restarts Redis once (losing every queued message) and
PostgreSQL once. The chaos phase and the draining after it are bounded to five minutes.

At the end it proves, from the database and from the marker files the operations write
themselves (``tests/soak_workflows.py``), which the engine never reads:

* every execution is terminal, with the status and payload its shape must give;
* no operation whose result was stored ran again, and no attempt ran twice;
* an operation ran more than once only where each earlier attempt was lost before its result
  was stored (or failed retryably on purpose), as its events say, and its record shows the
  attempt that ran last (or a later one that never started);
* the event log agrees with the state machines in every execution
  (``assert_operation_events_consistent``);
* no process of any operation is left running, commands they started included.

It prints the counts (executions, operations, invocations, kills, restarts, re-runs and why) past
pytest's capture, so that CI's output shows them; they are in the failure message too.
"""

import contextlib
import os
import random
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import kombu.pools
import psutil
import pytest
from django.db import connection
from django.test import override_settings

from tests.integration.conftest import _failed, engine_settings
from tests.integration.harness import (
    MARKERS_ENV,
    RedisServer,
    Stack,
    assert_operation_events_consistent,
    describe_execution,
    read_markers,
)
from tests.soak_workflows import DESIGNED_FAILURE, end_tag_of, expected_payload, tag_of
from workflows_app import services
from workflows_app.errors import ActionRefused
from workflows_app.models import Event, Execution, Operation
from workflows_app.states import EXECUTION_TERMINAL

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.postgres]

MODULES = ["tests.workflows", "tests.soak_workflows"]
TERMINAL = [status.value for status in EXECUTION_TERMINAL]

# --- sizes and timings ----------------------------------------------------------------------

EXECUTIONS = 500
#: The executions are started evenly over this many seconds, while the chaos goes on.
START_WINDOW = 150.0
#: Chaos phase plus draining: every execution must be terminal this long after the chaos began.
BOUND = 300.0
#: Seconds between two SIGKILLs of a random manager or agent.
KILL_EVERY = (3.0, 6.0)
#: When, in the start window, Redis and PostgreSQL are restarted.
REDIS_RESTART_AT = 0.3 * START_WINDOW
POSTGRES_RESTART_AT = 0.6 * START_WINDOW
POSTGRES_DOWN_FOR = 4.0
#: A test event or stop (cancel, kill) comes this long after its execution was started.
EVENT_AFTER = (1.0, 6.0)
STOP_AFTER = (2.0, 8.0)
#: How long a step sleeps: chosen per execution.
STEP_SECONDS = (0.0, 0.05, 0.1, 0.2, 0.4)
#: The shapes that complete, taken in turn; every 50th execution from the 7th is cancelled and
#: from the 32nd killed (ten of each).
COMPLETING = ("graph", "canvas", "steps", "event", "retry")
WORKFLOW_OF = {shape: f"soak_{shape}" for shape in (*COMPLETING, "cancel", "kill")}

#: How record_lost's callers word a lost attempt (agents/runner.py, agents/worker/*): an
#: operation may run again only after one of these, or after its designed retryable failure.
LOST_WORDING = {
    "its worker process was lost": "its pool process died",
    "lost during restart": "a starting manager found no live worker running it",
    "went offline": "its agent went offline",
    "lost: agent": "its agent started again",
    "handed back": "handed back by a worker shutting down",
    "its Celery message was revoked": "its message was revoked",
}
DESIGNED = "failed retryably on purpose (RecoverableError)"


# --- the plan: what the test starts, and what it sends when -------------------------------------

@dataclass
class Planned:
    n: int
    shape: str
    params: dict
    start_at: float
    event_at: float | None = None
    event_k: int | None = None
    stop_at: float | None = None
    execution_id: object = None
    started: bool = False
    event_sent: bool = False
    stopped: bool = False

    @property
    def workflow(self) -> str:
        return WORKFLOW_OF[self.shape]

    @property
    def expected_status(self) -> str:
        return "cancelled" if self.shape in ("cancel", "kill") else "completed"

    @property
    def expected_payload(self):
        return expected_payload(self.shape, self.n, self.event_k)

    @property
    def done(self) -> bool:
        return (self.started and (self.event_at is None or self.event_sent)
                and (self.stop_at is None or self.stopped))


def shape_of(n) -> str:
    if n % 50 == 7:
        return "cancel"
    if n % 50 == 32:
        return "kill"
    return COMPLETING[n % len(COMPLETING)]


def make_plan(rng, agents) -> list[Planned]:
    plan = []
    for n in range(EXECUTIONS):
        shape = shape_of(n)
        seconds = rng.choice(STEP_SECONDS)
        agent = agents[n % 2]
        params = {
            "graph": {"n": n, "agents": agents, "seconds": seconds},
            "canvas": {"n": n, "agents": agents, "seconds": seconds},
            "steps": {"n": n, "agents": agents, "seconds": seconds},
            "event": {"n": n, "agent": agent, "seconds": seconds},
            "retry": {"n": n, "agents": agents, "seconds": seconds},
            "cancel": {"n": n, "agent": agent},
            "kill": {"n": n, "agent": agent},
        }[shape]
        start_at = n * START_WINDOW / EXECUTIONS
        planned = Planned(n, shape, params, start_at)
        if shape == "event":
            planned.event_at = start_at + rng.uniform(*EVENT_AFTER)
            planned.event_k = rng.randrange(1000)
        if shape in ("cancel", "kill"):
            planned.stop_at = start_at + rng.uniform(*STOP_AFTER)
        plan.append(planned)
    return plan


# --- the stack under chaos ----------------------------------------------------------------------

class Chaos:
    """Two managers and two agents of one Stack, a Redis and a PostgreSQL cluster: kills and
    restarts, counted."""

    def __init__(self, stack, redis, cluster, seed):
        self.stack, self.redis, self.cluster = stack, redis, cluster
        self.seed, self.rng = seed, random.Random(seed)
        self.agents = [stack.agent_name("soak-1"), stack.agent_name("soak-2")]
        self.processes = {}  # name -> its current StackProcess
        self.kills = Counter()
        self.redis_restarts = 0
        self.postgres_restarts = 0
        self.unexpected_exits = []  # (name, exit status, its log's tail)

    def start(self):
        for name in ("soak-manager-1", "soak-manager-2"):
            self.processes[name] = self.stack.start_manager(concurrency=2, name=name)
        for name in self.agents:
            self.processes[name] = self.stack.start_agent(name, concurrency=2)
        for name in self.agents:
            self.stack.wait_for_agent(name)

    def kill_one(self) -> str:
        """SIGKILL a random manager or agent (its process group, as a crash would) and start it
        again at once."""
        name = self.rng.choice(sorted(self.processes))
        proc = self.processes[name]
        self.stack.kill(proc)
        self.processes[name] = self.stack.restart(proc)
        self.kills[name] += 1
        return name

    def restart_redis(self):
        """SIGKILL Redis and start a new one on the same port: every queued message is lost."""
        self.redis.restart()
        self.redis_restarts += 1

    def restart_postgres(self):
        """A fast shutdown (every client disconnected), down POSTGRES_DOWN_FOR seconds, start."""
        self.cluster.restart(mode="fast", down_for=POSTGRES_DOWN_FOR)
        self.postgres_restarts += 1
        connection.close()  # the test process' own connection died with the server

    def look_for_exits(self):
        """A manager or agent that exited by itself is a failure of the soak: note it (with its
        log) and start it again, so that the soak goes on and shows what else happens."""
        for name, proc in list(self.processes.items()):
            if not proc.expected_exit and not proc.alive():
                self.unexpected_exits.append((name, proc.returncode, proc.log_tail(60)))
                proc.expected_exit = True
                self.processes[name] = self.stack.restart(proc)


# --- driving the soak ---------------------------------------------------------------------------

@dataclass
class Timings:
    chaos: float = 0.0
    drain: float = 0.0
    log: list = field(default_factory=list)  # what the chaos did, when
    refused: list = field(default_factory=list)  # events, cancels refused: their execution had ended


def drive(plan, chaos, timings) -> float:
    """Start the plan's executions, send their events, cancel and kill those planned, and meanwhile
    kill a manager or agent every few seconds and restart Redis and PostgreSQL once each. Returns
    the monotonic time the chaos began at."""
    rng = chaos.rng
    began = time.monotonic()
    next_kill = rng.uniform(*KILL_EVERY)
    redis_done = postgres_done = False
    to_start, waiting = list(plan), list(plan)

    def note(what):
        timings.log.append(f"{time.monotonic() - began:.1f}s ({time.strftime('%H:%M:%S', time.gmtime())} UTC) {what}")

    while to_start or waiting or not (redis_done and postgres_done):
        now = time.monotonic() - began
        while to_start and to_start[0].start_at <= now:
            planned = to_start.pop(0)
            planned.execution_id = services.start(planned.workflow, planned.params).pk
            planned.started = True
        for planned in waiting:
            if not planned.started:
                break
            send_what_is_due(planned, now, timings)
        waiting = [p for p in waiting if not p.done]

        if now >= next_kill:
            note(f"SIGKILL {chaos.kill_one()} and start it again")
            next_kill = now + rng.uniform(*KILL_EVERY)
        if not redis_done and now >= REDIS_RESTART_AT:
            chaos.restart_redis()
            redis_done = True
            note("Redis restarted")
        if not postgres_done and now >= POSTGRES_RESTART_AT:
            chaos.restart_postgres()
            postgres_done = True
            note(f"PostgreSQL restarted (down {POSTGRES_DOWN_FOR}s)")
        chaos.look_for_exits()
        time.sleep(0.05)
    timings.chaos = time.monotonic() - began
    return began


def send_what_is_due(planned, now, timings):
    """The event of a started execution, or its cancel or kill, once its time has come. A refusal
    (the execution had ended already) is noted: it is a failure of the soak."""
    if planned.event_at is not None and not planned.event_sent and planned.event_at <= now:
        try:
            services.send_event(planned.execution_id, "go", {"k": planned.event_k})
        except ActionRefused as refused:
            timings.refused.append(f"#{planned.n} {planned.shape} {planned.execution_id}: {refused}")
        planned.event_sent = True
    if planned.stop_at is not None and not planned.stopped and planned.stop_at <= now:
        stop = services.cancel if planned.shape == "cancel" else services.kill
        try:
            stop(planned.execution_id)
        except ActionRefused as refused:
            timings.refused.append(f"#{planned.n} {planned.shape} {planned.execution_id}: {refused}")
        planned.stopped = True


def drain(plan, chaos, began, timings) -> list:
    """Wait until every execution is terminal, at most until BOUND seconds after the chaos began;
    returns the ids still active then."""
    ids = [p.execution_id for p in plan]
    active = ids
    while time.monotonic() - began < BOUND:
        chaos.look_for_exits()
        active = list(Execution.objects.filter(pk__in=ids).exclude(status__in=TERMINAL).values_list("pk", flat=True))
        if not active:
            break
        time.sleep(1.0)
    timings.drain = time.monotonic() - began - timings.chaos
    return active


# --- what the soak checks -----------------------------------------------------------------------

def check_results(plan) -> list[str]:
    """Every execution terminal, with the status and payload of its shape."""
    problems = []
    rows = {row["id"]: row for row in Execution.objects.filter(pk__in=[p.execution_id for p in plan])
            .values("id", "status", "payload", "error")}
    for planned in plan:
        row = rows[planned.execution_id]
        if row["status"] != planned.expected_status:
            problems.append(f"#{planned.n} {planned.shape} {planned.execution_id}: {row['status']}, "
                            f"expected {planned.expected_status}; error: {row['error'][-300:]}")
        elif planned.expected_status == "completed" and row["payload"] != planned.expected_payload:
            problems.append(f"#{planned.n} {planned.shape} {planned.execution_id}: payload {row['payload']}, "
                            f"expected {planned.expected_payload}")
    return problems


def why_lost(message) -> str | None:
    for wording, reason in LOST_WORDING.items():
        if wording in message:
            return reason
    return None


def check_invocations(plan, markers_dir, counts) -> list[str]:
    """The invocation records against the operations' records:

    * no attempt ran twice;
    * no operation ran again after the attempt whose result was stored, which ran once;
    * each attempt that ran before the last one left ``started`` as lost (or, for ``soak_flaky``,
      with its designed retryable failure), the reason counted;
    * every attempt that ran was started by the engine (its ``task_started`` event), and the
      operation's record shows the last of them, or a later attempt that never started (sent
      again, then cancelled).

    A lost attempt that still reported afterwards (a ``stale_report``) is counted apart."""
    problems = []
    ids = [p.execution_id for p in plan]
    events = defaultdict(list)
    task_events = (Event.objects.filter(execution_id__in=ids, operation__isnull=False).exclude(type="log")
                   .order_by("id").only("id", "execution_id", "operation", "type", "message", "data"))
    for event in task_events:
        events[(event.execution_id, event.operation)].append(event)
    operations = list(Operation.objects.filter(execution_id__in=ids))
    counts["operations"] = len(operations)
    counts["operations by state"] = Counter(op.state for op in operations)
    reruns, stale_after_loss = Counter(), []
    invoked = 0
    for op in operations:
        runs = read_markers(markers_dir, tag_of(op.pk))
        invoked += len(runs)
        where = f"{op.execution_id} {op.name} [{op.operation}]"
        attempts = Counter(run["attempt"] for run in runs)
        for attempt, times in attempts.items():
            if times > 1:
                problems.append(f"{where}: attempt {attempt} ran {times} times")
        op_events = events[(op.execution_id, op.name)]
        stored = [e.data.get("attempt") for e in op_events if e.type == "task_succeeded"]
        for attempt in stored:
            later = sorted(a for a in attempts if a > attempt)
            if later:
                problems.append(f"{where}: ran again (attempts {later}) after the result of attempt {attempt} "
                                "was stored")
        if op.state == "succeeded" and attempts.get(op.attempt) != 1:
            problems.append(f"{where}: succeeded with attempt {op.attempt}, which ran "
                            f"{attempts.get(op.attempt, 0)} times")
        started = {e.data.get("attempt") for e in op_events if e.type == "task_started"}
        if set(attempts) - started:  # a claim writes task_started before the function runs
            problems.append(f"{where}: attempts {sorted(attempts)} ran, the events started only {sorted(started)}")
        if attempts and max(attempts) > op.attempt:
            problems.append(f"{where}: the record shows attempt {op.attempt}, but attempt {max(attempts)} ran")
        left = {e.data.get("attempt"): e for e in op_events
                if isinstance(e.data, dict) and e.data.get("from") == "started"}
        stale = {e.data.get("attempt") for e in op_events if e.type == "stale_report"}
        for attempt in sorted(attempts)[:-1]:
            exit_event = left.get(attempt)
            if exit_event is None or exit_event.type != "task_rescheduled":
                problems.append(f"{where}: attempt {attempt} ran, then attempt {max(attempts)} too, but attempt "
                                f"{attempt} left started with {exit_event.type if exit_event else 'no event'}")
                continue
            reason = why_lost(exit_event.message)
            if reason is None and op.operation == "soak_flaky" and DESIGNED_FAILURE in exit_event.message:
                reason = DESIGNED
            if reason is None:
                problems.append(f"{where}: attempt {attempt} was rescheduled ({exit_event.message[:200]!r}), "
                                f"neither lost nor a designed failure, and the operation ran again")
                continue
            reruns[reason] += 1
            if attempt in stale:
                stale_after_loss.append(f"{where}: attempt {attempt} ({reason}) reported afterwards")
    counts["invocations"] = invoked
    counts["re-runs"] = reruns
    counts["lost attempts that reported afterwards"] = stale_after_loss
    return problems


def check_event_logs(plan) -> list[str]:
    problems = []
    for planned in plan:
        try:
            assert_operation_events_consistent(planned.execution_id)
        except AssertionError as failure:
            problems.append(f"#{planned.n} {planned.shape}: {failure}")
    return problems


def _running(pid, created) -> bool:
    """Whether the process ``pid`` started at ``created`` (not a later one with its pid) runs."""
    try:
        process = psutil.Process(pid)
        return abs(process.create_time() - created) < 0.05 and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def operation_processes_running(plan, markers_dir, explain=False, counts=None) -> list[str]:
    """The invocations whose process still runs the operation (it started and never ended, and
    that very process is alive) and the commands operations started that still run. With
    ``explain``, each comes with its execution's timeline; ``counts`` gets what was looked at."""
    found, executions = [], set()
    looked = Counter()
    operations = Operation.objects.filter(execution_id__in=[p.execution_id for p in plan])
    for op in operations.only("id", "name", "execution_id"):
        runs = read_markers(markers_dir, tag_of(op.pk))
        ended = Counter((m["pid"], m["attempt"]) for m in read_markers(markers_dir, end_tag_of(op.pk)))
        looked["invocations"] += len(runs)
        looked["invocations that never ended (killed or lost)"] += sum(
            1 for run in runs if not ended[(run["pid"], run["attempt"])])
        looked["commands"] += sum(1 for run in runs if run.get("child"))
        for run in runs:
            began = time.strftime("%H:%M:%S", time.gmtime(run["time"])) + f".{int(run['time'] % 1 * 1000):03d}"
            if not ended[(run["pid"], run["attempt"])] and _running(run["pid"], run["created"]):
                found.append(f"{op.execution_id} {op.name} attempt {run['attempt']} (began {began}): "
                             f"process {run['pid']} on {run['agent']}")
                executions.add(op.execution_id)
            if run.get("child") and _running(run["child"], run["child_created"]):
                found.append(f"{op.execution_id} {op.name} attempt {run['attempt']} (began {began}): "
                             f"its command, process {run['child']}")
                executions.add(op.execution_id)
    if explain:
        found += [timeline(pk) for pk in sorted(executions, key=str)]
    if counts is not None:
        counts["operation processes looked at"] = dict(looked)
    return found


def operation_processes_left(plan, chaos, counts) -> list[str]:
    """:func:`operation_processes_running` once the kills the engine may still be carrying out
    (SIGKILL after KILL_GRACE_SECONDS) had the time to end."""
    markers = chaos.stack.markers_dir
    deadline = time.monotonic() + chaos.stack.workflows["KILL_GRACE_SECONDS"] + 5
    while operation_processes_running(plan, markers) and time.monotonic() < deadline:
        time.sleep(0.5)
    found = operation_processes_running(plan, markers, counts=counts)
    return operation_processes_running(plan, markers, explain=True) if found else found


def stop_outcomes(plan) -> Counter:
    """What the test's cancels and kills met: the state (and error) of the step they were aimed at
    — ``hold`` (cancel) and ``stubborn`` (kill) — or that the execution had not got that far."""
    outcomes = Counter()
    for planned in plan:
        if planned.shape not in ("cancel", "kill"):
            continue
        target = "hold" if planned.shape == "cancel" else "stubborn"
        op = Operation.objects.filter(execution_id=planned.execution_id, name=target).first()
        if op is None:
            outcomes[f"{planned.shape}: before {target} was asked for"] += 1
        else:
            error = op.error if isinstance(op.error, dict) else None
            error = f" ({error.get('type')}: {error.get('message', '')[:40]})" if error else ""
            outcomes[f"{planned.shape}: {target} {op.state}{error}"] += 1
    return outcomes


def timeline(execution_id) -> str:
    """The execution's events with their times (UTC), for a failure message."""
    lines = [f"events of {execution_id}:"]
    for event in Event.objects.filter(execution_id=execution_id).order_by("id"):
        lines.append(f"    {event.timestamp:%H:%M:%S.%f} #{event.id} {event.type} {event.operation or '-'}: "
                     f"{event.message[:160]} {event.data}")
    return "\n".join(lines)


def report(plan, chaos, counts, timings) -> str:
    """The counts, and what the chaos did when."""
    executions = Execution.objects.filter(pk__in=[p.execution_id for p in plan if p.execution_id])
    statuses = Counter(executions.values_list("status", flat=True))
    by_workflow = defaultdict(Counter)
    for workflow_id, status in executions.values_list("workflow_id", "status"):
        by_workflow[workflow_id][status] += 1
    reruns = counts.get("re-runs", Counter())
    stale = counts.get("lost attempts that reported afterwards", [])
    lines = [
        f"soak (seed {chaos.seed}): {len(plan)} executions; chaos phase {timings.chaos:.0f}s, "
        f"draining {timings.drain:.0f}s",
        f"  executions by status: {dict(statuses)}",
        "  by workflow: " + ", ".join(f"{name} {dict(c)}" for name, c in sorted(by_workflow.items())),
        f"  operations: {counts.get('operations', '?')} {dict(counts.get('operations by state', {}))}; "
        f"invocations: {counts.get('invocations', '?')}",
        "  the test's cancels and kills: "
        + ", ".join(f"{n} {what}" for what, n in sorted(stop_outcomes(plan).items())),
        f"  operation processes looked at: {counts.get('operation processes looked at', '?')}",
        f"  kills: {dict(chaos.kills)} ({sum(chaos.kills.values())} in all); "
        f"Redis restarts: {chaos.redis_restarts}; PostgreSQL restarts: {chaos.postgres_restarts}",
        f"  re-runs: {sum(reruns.values())}" + "".join(f"\n    {n} {why}" for why, n in reruns.most_common()),
        f"  lost attempts that still reported afterwards: {len(stale)}" + "".join(f"\n    {s}" for s in stale[:20]),
        f"  managers or agents that exited by themselves: {len(chaos.unexpected_exits)}"
        + "".join(f"\n    {name} exited {code}" for name, code, _ in chaos.unexpected_exits),
        "  chaos:" + "".join(f"\n    {what}" for what in timings.log),
    ]
    return "\n".join(lines)


# --- the fixture: the soak's own PostgreSQL, Redis and stack ------------------------------------

@contextlib.contextmanager
def publishing_to(url):
    """The test process' Celery app — its starts, events, cancels and kills — uses the broker
    ``url`` inside the block. Celery takes the broker from the environment (``CELERY_BROKER_URL``)
    before its own configuration, each time it opens its connection pool; so the variable is set
    and the pool (and the producer pool on it) dropped, on the way in and on the way out."""
    from switchyard.celery import app

    def use(broker):
        if broker is None:
            os.environ.pop("CELERY_BROKER_URL", None)
        else:
            os.environ["CELERY_BROKER_URL"] = broker
        # kombu's pools are shared, keyed by broker URL: closing the app's own would hand every
        # later test a closed pool. Drop them all; each is opened again on demand.
        kombu.pools.reset()
        app._pool = None
        app.amqp._producer_pool = None

    saved = os.environ.get("CELERY_BROKER_URL")
    use(url)
    try:
        with app.connection_for_write() as conn:
            assert conn.as_uri(include_password=True) == url, f"the test process uses {conn.as_uri()}, not {url}"
        yield
    finally:
        use(saved)


@pytest.fixture
def soak(request, tmp_path, own_postgres, monkeypatch):
    """A Chaos over a Stack whose processes — and the test process — use the test's own
    PostgreSQL cluster (``own_postgres``) and Redis, the test's own management queue, short engine
    timings and the soak workflows. Everything is torn down afterwards, the logs printed on
    failure. ``SOAK_SEED`` makes the same random choices as the run that printed it (the timing differs)."""
    seed = int(os.environ.get("SOAK_SEED") or random.SystemRandom().randrange(10**6))
    suffix = uuid.uuid4().hex[:8]
    workflows = engine_settings(suffix)
    markers = tmp_path / "markers"
    markers.mkdir()
    monkeypatch.setenv("SWITCHYARD_WORKFLOW_MODULES", ",".join(MODULES))
    monkeypatch.setenv(MARKERS_ENV, str(markers))
    redis = RedisServer(tmp_path / "redis").start()
    try:
        with publishing_to(redis.url), \
                override_settings(WORKFLOWS=workflows, SWITCHYARD_WORKFLOW_MODULES=MODULES):
            # Constructed now, inside own_postgres: its processes inherit the cluster's database.
            stack = Stack(tmp_path, suffix=suffix, workflows=workflows, markers_dir=markers,
                          extra_env={"SWITCHYARD_WORKFLOW_MODULES": ",".join(MODULES)})
            stack.use_broker(redis.url)
            try:
                yield Chaos(stack, redis, own_postgres, seed)
            finally:
                stack.close(failed=_failed(request.node))
                if _failed(request.node):
                    print(f"\n===== PostgreSQL log (tail) =====\n{own_postgres.log_tail(200)}")
    finally:
        redis.kill()


# --- the soak -------------------------------------------------------------------------------------

@pytest.mark.timeout(480)
def test_soak_with_chaos(soak, capsys):
    chaos = soak
    chaos.start()
    plan = make_plan(chaos.rng, chaos.agents)
    timings, counts = Timings(), {}

    began = drive(plan, chaos, timings)
    still_active = drain(plan, chaos, began, timings)
    assert not still_active, (f"{len(still_active)} execution(s) still active {BOUND:.0f}s after the chaos began\n"
                              + report(plan, chaos, counts, timings) + "\n\n"
                              + "\n\n".join(describe_execution(pk) for pk in still_active[:5]))

    leftovers = operation_processes_left(plan, chaos, counts)
    problems = {
        "results": check_results(plan),
        "invocation records": check_invocations(plan, chaos.stack.markers_dir, counts),
        "event logs": check_event_logs(plan),
        "operation processes left running": leftovers,
        "events and cancels refused (the execution had ended)": timings.refused,
        "managers or agents that exited by themselves": [f"{name} exited {code}:\n{log}"
                                                         for name, code, log in chaos.unexpected_exits],
    }
    summary = report(plan, chaos, counts, timings)
    with capsys.disabled():  # the counts belong in CI's output, whether the test passes or not
        print("\n" + summary)
    failed = {what: found for what, found in problems.items() if found}
    assert not failed, summary + "".join(f"\n\n{what} ({len(found)}):\n  " + "\n  ".join(found[:25])
                                         for what, found in failed.items())
