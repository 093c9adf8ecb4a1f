"""Throughput (issue 7, cases 1–4): Switchyard against plain Celery on the same broker, database
and agent worker processes (the plain Celery tasks go to the agent's queue).

1. fan-out: a workflow whose graph is N independent no-op steps, from ``services.start`` until
   the execution is ``completed`` / a ``group`` of N no-op tasks, from ``apply_async`` until
   every result is in.
2. fan-in: N no-ops then one join / a ``chord`` (header of N no-ops, a no-op body).
3. chain: M sequential no-ops / a ``chain`` of M immutable no-op signatures; also per step.
4. start throughput: K ``POST /api/v1/executions`` (DRF's ``APIClient``, in this process), 201s
   per second / K ``send_task`` of the no-op per second. What the starts started is waited for
   (untimed) before the next case.
5. the fan-out's durable floor (PostgreSQL): a ``group`` of N tasks that each do only the durable
   work Switchyard's guarantees ask of an operation, with no engine: their N rows inserted in one
   committed statement before the group is sent (stored before sent), then in each task a
   committed claim of its attempt before it runs (fencing) and its result committed before it
   returns (acknowledged after commit). Measured right after the ``group``, in every round, from
   the insert until every result is in; what is left between it and the fan-out is the engine's.
6. the floor with its history (PostgreSQL): the same, each state change also stored with its
   event in its statement, as Switchyard does for an operation (``sending`` and ``sent`` with the
   rows, ``started`` with the claim, ``succeeded`` with the result), in a table of events
   indexed as Switchyard's is.
7. the broker floor (PostgreSQL): what an operation costs on the path agents take, with no
   engine. The rows are inserted as in 5; each task claims its attempt through the broker with
   the agent's own line (``agents.worker.link.Link``) and waits for the answer, then reports its
   outcome before it returns; a responder in this process (a manager's ``Inbox``, on a queue of
   its own) stores each batch of claims and outcomes in one transaction, one statement each, and
   answers the claims once it committed. The same for the chain: a ``chain`` of M such tasks.
8. the lean floor (PostgreSQL): the broker floor with no claim — each task runs at once, as an
   agent would whose message carries a grant the manager stored when it sent it, and reports its
   start and its outcome together in one report; the responder stores a row's move from ``sent``
   to ``succeeded`` in one statement. The least an operation costs on any path where agents speak
   through the broker only: its message and one report. The same for the chain.
9. the batched floor (PostgreSQL): the lean floor with its reports sent by the agent's main
   process, which publishes the reports of the tasks that ended by the next turn of its event loop
   in one message and only then acknowledges their messages (taking one more message meanwhile for
   each report that waits). The same for the chain.
10. the start's request alone: the K starts of 4 with the manager and the agent frozen (SIGSTOP
   to their process groups) while they are made, so that nothing works off the starts on the same
   cores meanwhile / K ``send_task`` with the agent frozen. What a start's own request costs beside
   a publish; what 4 loses beyond it is the execution's work taking the same cores. The starts and
   the tasks run once the processes are let go (untimed).

Given the manager's and the agent's processes, each round also takes the CPU every part of the
machine spends (``bench/cpu.py``) on the fan-out and the ``group``, per operation, and on the
starts and the ``send_task`` s, per start until its execution completed and per message until its
task ran.

The Celery side needs a result backend (the project has one whenever the broker is Redis);
without one its column reads ``n/a``.
"""

import os
import signal
import statistics
import sys
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

from django.db import connection, transaction

from agents.worker.inbox import Inbox
from bench import cpu, messages
from bench.workflows import (CELERY_BATCHED_NOOP, CELERY_CLAIMED_NOOP, CELERY_DURABLE_NOOP, CELERY_NOOP,
                             CELERY_RECORDED_NOOP, CELERY_REPORTED_NOOP, FLOOR_EVENTS_TABLE, FLOOR_TABLE,
                             broker_floor_queue)
from workflows_app import signing, wire
from workflows_app.wire import keys

POLL = 0.005
TIMEOUT = 300.0

DEFAULT_SIZES = {"fanout": 1000, "chain": 100, "starts": 200}


@dataclass(frozen=True)
class Floor:
    """One of the fan-out's floors (PostgreSQL): its rows' key, name and detail, the name its note
    gives it, its task, and whether that task also stores the state events."""
    key: str
    name: str
    detail: str
    short: str
    task: str
    history: bool = False


FLOORS = (Floor("floor", "durable floor", "a group whose tasks make the two commits", "floor", CELERY_DURABLE_NOOP),
          Floor("history", "durable floor with its history", "each commit also stores its state event",
                "floor with history", CELERY_RECORDED_NOOP, history=True),
          Floor("broker", "broker floor", "a group whose tasks claim and report through the broker as agents do, "
                "stored in batches", "broker floor", CELERY_CLAIMED_NOOP),
          Floor("lean", "lean floor", "a group whose tasks run unasked and report start and outcome in one report "
                "through the broker, stored in batches", "lean floor", CELERY_REPORTED_NOOP),
          Floor("batched", "batched floor", "the lean floor's tasks reported by the agent's main process, the "
                "reports of the tasks that ended together in one message", "batched floor", CELERY_BATCHED_NOOP))
#: The floors the chain is also measured against.
CHAIN_FLOORS = FLOORS[2:]


@dataclass
class Row:
    case: str
    switchyard: list
    celery: list
    unit: str = "s"  # "s": seconds, lower is better; "/s": per second, higher is better; "ms", "n" (messages): lower is better
    #: CPU samples of each side (``cpu.Meter``), when the row is a CPU row: its note breaks them down.
    cpu: dict = field(default_factory=dict)
    #: For a CPU row, the wall time per unit of work (ms) of each side, for how busy the cores were.
    wall: dict = field(default_factory=dict)
    #: What the note column says before anything the report works out.
    note: str = ""


def _wait_completed(execution_id, timeout=TIMEOUT):
    from workflows_app.models import Execution

    began = time.monotonic()
    deadline = began + timeout
    while True:
        status = Execution.objects.filter(pk=execution_id).values_list("status", flat=True).get()
        if status == "completed":
            return time.monotonic()
        if status in ("failed", "cancelled", "timed_out"):
            raise RuntimeError(f"benchmark execution {execution_id} ended {status}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"benchmark execution {execution_id} still {status} after {timeout} s")
        # 1% of the time so far (at least POLL): the looking must not take the CPU it measures.
        time.sleep(max(POLL, min(0.05, (time.monotonic() - began) / 100)))


def _switchyard(workflow_id, parameters):
    from workflows_app import services

    asked = time.monotonic()
    execution = services.start(workflow_id, parameters)
    return _wait_completed(execution.pk) - asked


def _celery(signature, asked=None):
    """Seconds from ``asked`` (default: now) until every result of ``signature`` is in."""
    asked = time.monotonic() if asked is None else asked
    result = signature.apply_async()
    result.get(timeout=TIMEOUT, propagate=True, interval=POLL, disable_sync_subtasks=False)
    elapsed = time.monotonic() - asked
    result.forget()
    return elapsed


def _floor_create():
    """The durable floor's tables (PostgreSQL): one row per operation, and the events of the floor
    with its history, indexed as Switchyard's events are; dropped by :func:`_floor_drop`."""
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {FLOOR_TABLE} (id bigserial PRIMARY KEY, attempt int NOT NULL, "
                       "state text NOT NULL, result jsonb)")
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {FLOOR_EVENTS_TABLE} (id bigserial PRIMARY KEY, row_id bigint NOT NULL "
                       f"REFERENCES {FLOOR_TABLE} (id), type text NOT NULL, message text NOT NULL, data jsonb NOT NULL, "
                       "timestamp timestamptz NOT NULL DEFAULT now())")
        cursor.execute(f"CREATE INDEX IF NOT EXISTS {FLOOR_EVENTS_TABLE}_row ON {FLOOR_EVENTS_TABLE} (row_id, id)")
        cursor.execute(f"CREATE INDEX IF NOT EXISTS {FLOOR_EVENTS_TABLE}_type ON {FLOOR_EVENTS_TABLE} (type, id)")


def _floor_drop():
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {FLOOR_EVENTS_TABLE}, {FLOOR_TABLE}")


def _floor_tasks(app, agent, count, fl, canvas):
    """Empty the tables (untimed) and build the ``canvas`` (``group`` or ``chain``) of ``count``
    tasks of the floor ``fl``, rows 1 to ``count``, attempt 1: built before the clock starts, as
    the plain ``group`` is."""
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {FLOOR_EVENTS_TABLE}, {FLOOR_TABLE}")
    return canvas([app.signature(fl.task, args=(i, 1), queue=agent, immutable=True) for i in range(1, count + 1)])


def _broker_floor_take(bodies):
    """The broker floor's responder: a batch of claims and outcomes, each checked for its agent's
    proof as a manager does, stored in one transaction, one statement each (a claim moves its row
    from ``sent`` to ``started``: fencing, an attempt that is not waiting is not answered); the
    answers to the claims that started, proved for their agent, sent once it committed."""
    agent_keys = signing.agent_keys({body["agent"] for body in bodies})
    bodies = [body for body in bodies if keys.proven(body["proof"], agent_keys[body["agent"]], keys.Purpose.REPORT,
                                                     keys.without_proof(body))]
    claims = {_floor_key(body): body for body in bodies if body.get("kind") == wire.Kind.CLAIM}
    outcomes = [_floor_key(body) for body in bodies if body.get("kind") == wire.Kind.OUTCOME and not body.get("started")]
    # The lean floor's: its start and outcome in one report, a row moved from sent to succeeded.
    unasked = [_floor_key(body) for body in bodies if body.get("kind") == wire.Kind.OUTCOME and body.get("started")]
    # The batched floor's: the reports of several rows in one.
    unasked += [(int(row), attempt) for body in bodies if body.get("kind") == "batch" for row, attempt in body["reports"]]
    with transaction.atomic():
        started = _floor_move(claims, "sent", "started")
        _floor_move(outcomes, "started", "succeeded", with_result=True)
        _floor_move(unasked, "sent", "succeeded", with_result=True)
    answers = []
    for key in started:
        claim = claims[key]
        answer = {"id": claim["id"], "verdict": wire.Verdict.RUN}
        answers.append((claim["reply_to"], {**answer, "proof": keys.prove(agent_keys[claim["agent"]], keys.Purpose.ANSWER,
                                                                           answer)}))
    return answers


def _floor_key(report):
    return int(report["operation"]), report["attempt"]


def _floor_move(keys, source, target, *, with_result=False) -> list:
    """Move the rows of ``keys`` (row id, attempt) that are in ``source`` to ``target`` (storing a
    no-op's result, ``null``, ``with_result``), in one statement; the keys of those it moved."""
    if not keys:
        return []
    stored = ", result = 'null'::jsonb" if with_result else ""
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {FLOOR_TABLE} SET state = %s{stored} WHERE (id, attempt) IN "
                       "(SELECT * FROM unnest(%s::bigint[], %s::int[])) AND state = %s RETURNING id, attempt",
                       [target, [key[0] for key in keys], [key[1] for key in keys], source])
        return [tuple(row) for row in cursor.fetchall()]


def _floor(signature, count, history):
    """A floor: the rows stored, ``sent`` (with their ``sending`` and ``sent`` events when
    ``history``), in one committed statement before the group is sent, then the group until every
    result is in and every row ``succeeded``; seconds. Every row must have ended ``succeeded``
    (with its four events): a claim refused would make the floor look cheaper than it is."""
    insert = f"INSERT INTO {FLOOR_TABLE} (id, attempt, state) SELECT i, 1, 'sent' FROM generate_series(1, %s) AS i"
    if history:
        insert = (f"WITH stored AS ({insert} RETURNING id, attempt) "
                  f"INSERT INTO {FLOOR_EVENTS_TABLE} (row_id, type, message, data) "
                  "SELECT id, 'task_' || t.target, t.source || ' -> ' || t.target, "
                  "jsonb_build_object('from', t.source, 'to', t.target, 'attempt', attempt) "
                  "FROM stored, (VALUES ('pending', 'sending'), ('sending', 'sent')) AS t (source, target)")
    asked = time.monotonic()
    with connection.cursor() as cursor:  # autocommit: the statement commits
        cursor.execute(insert, [count])
    elapsed = _celery(signature, asked)
    deadline = time.monotonic() + TIMEOUT
    while True:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT (SELECT count(*) FROM {FLOOR_TABLE} WHERE state = 'succeeded'), "
                           f"(SELECT count(*) FROM {FLOOR_EVENTS_TABLE})")
            succeeded, events = cursor.fetchone()
        # The broker floor's last outcomes are stored by its responder after their tasks returned:
        # it ends once they are (the durable floors' tasks stored theirs before they returned).
        if succeeded == count or time.monotonic() > deadline:
            break
        time.sleep(POLL)
        elapsed = time.monotonic() - asked
    if succeeded != count or events != (4 * count if history else 0):
        raise RuntimeError(f"floor: {succeeded} of {count} rows succeeded, {events} events")
    return elapsed


def _api_client():
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    # A superuser: it may start, and its permission checks read nothing (comparable to earlier runs).
    user, _ = get_user_model().objects.update_or_create(username="switchyard-bench", defaults={"is_superuser": True})
    client = APIClient(SERVER_NAME="localhost")
    client.force_authenticate(user=user)
    return client


def _starts(client, k, agent):
    """K starts through the REST API; returns (starts per second, the executions' ids)."""
    ids = []
    began = time.monotonic()
    for _ in range(k):
        response = client.post("/api/v1/executions", {"workflow_id": "bench_single", "parameters": {"agent": agent}},
                               format="json")
        if response.status_code != 201:
            raise RuntimeError(f"POST /api/v1/executions answered {response.status_code}: {response.content[:500]!r}")
        ids.append(response.json()["id"])
    return k / (time.monotonic() - began), ids


@contextmanager
def _frozen(processes):
    """The process groups of ``processes`` (the stack's manager and agent) stopped meanwhile."""
    for process in processes:
        os.killpg(process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for process in processes:
            os.killpg(process.pid, signal.SIGCONT)


def _sends(app, k, agent):
    """K ``send_task`` of the no-op; returns (messages per second, their results)."""
    began = time.monotonic()
    results = [app.send_task(CELERY_NOOP, args=[i], queue=agent) for i in range(k)]
    return k / (time.monotonic() - began), results


def run(stack, agent, rounds, sizes=None, processes=None):
    """The rows of :func:`report`; ``processes``: the manager's and the agent's ``StackProcess``,
    for the CPU rows (left out without them). The durable floor is measured on PostgreSQL with a
    result backend; its table is dropped at the end, whatever happened."""
    from switchyard.celery import app

    floor = bool(app.conf.result_backend) and connection.vendor == "postgresql"
    if floor:
        _floor_create()
        responder = Inbox(take=_broker_floor_take, queue=broker_floor_queue)
        responder.start()
    try:
        return _run(app, agent, rounds, sizes, processes, floor)
    finally:
        if floor:
            responder.stopped.set()
            responder.join(timeout=5)
            _floor_drop()


def _run(app, agent, rounds, sizes, processes, floor):
    from celery import chain, chord, group

    sizes = {**DEFAULT_SIZES, **(sizes or {})}
    n, m, k = sizes["fanout"], sizes["chain"], sizes["starts"]
    has_backend = bool(app.conf.result_backend)
    noop = app.signature(CELERY_NOOP, queue=agent, immutable=True)

    def noops(count):  # immutable: no result is passed on, as between Switchyard's steps
        return [noop.clone() for _ in range(count)]

    rows = {key: Row(case, [], []) for key, case in (
        ("fanout", f"fan-out: {n} no-ops"),
        ("fanin", f"fan-in: {n} no-ops then a join (Celery: chord)"),
        ("chain", f"chain: {m} sequential no-ops"),
    )}
    rows["starts"] = Row(f"start throughput: {k} starts (Switchyard: POST /executions 201s; Celery: send_task)",
                         [], [], unit="/s")
    if processes:
        rows["starts alone"] = Row(f"start throughput, the request alone: {k} starts with the manager and agent frozen "
                                   "(Celery: send_task, the agent frozen)", [], [], unit="/s")
    floors = FLOORS if floor else ()
    for fl in floors:  # its Switchyard column is the fan-out's own list of times: its ratio is fan-out / floor
        rows[fl.key] = Row(f"fan-out: {n} no-ops, {fl.name} ({fl.detail})", rows["fanout"].switchyard, [])
    chain_floors = CHAIN_FLOORS if floors else ()
    for fl in chain_floors:  # the same for the chain
        rows[f"chain {fl.key}"] = Row(f"chain: {m} sequential no-ops, {fl.name} (a chain of its tasks)",
                                      rows["chain"].switchyard, [])
    meters = {}
    if processes:
        for key, case in (("fanout cpu", f"fan-out: CPU per operation, every process on the machine ({n} no-ops)"),
                          ("starts cpu", f"start throughput: CPU per start until its execution completed (Celery: per "
                                         f"send_task until its task ran; {k} starts)")):
            rows[key] = Row(case, [], [], unit="ms")
            meters[key] = {side: cpu.Meter(*(process.pid for process in processes)) for side in ("switchyard", "celery")}
        for fl in floors:  # the floor's meter only: its Switchyard column is the fan-out's own list
            rows[f"{fl.key} cpu"] = Row(f"fan-out: CPU per operation, {fl.name} ({n} no-ops)",
                                       rows["fanout cpu"].switchyard, [], unit="ms",
                                       note="Switchyard: the fan-out's, above")
            meters[f"{fl.key} cpu"] = {"celery": cpu.Meter(*(process.pid for process in processes))}

    redis = messages.redis_client(app)
    if redis is not None:
        rows["fanout messages"] = Row(f"fan-out: messages through the broker per operation ({n} no-ops; pushed into "
                                      "queues + published)", [], [], unit="n")
        counters = {side: messages.Counter(redis) for side in ("switchyard", "celery")}

    def metered(key, side, count):
        if key == "fanout cpu" and redis is not None:
            return _both(meters[key][side].measure(count) if key in meters else nullcontext(),
                         counters[side].measure(count))
        return meters[key][side].measure(count) if key in meters else nullcontext()

    client = _api_client()

    # Warm up both sides (imports, connections, pool processes, the API's first requests), untimed.
    _switchyard("bench_fan_in", {"n": 2, "agent": agent})
    for execution_id in _starts(client, 5, agent)[1]:
        _wait_completed(execution_id)
    if has_backend:
        _celery(group(noops(2)))
        for fl in floors:
            _floor(_floor_tasks(app, agent, 2, fl, group), 2, fl.history)
        for fl in chain_floors:
            _floor(_floor_tasks(app, agent, 2, fl, chain), 2, False)
        _celery(chord(noops(2), noop.clone()))
        for result in _sends(app, 5, agent)[1]:
            result.get(timeout=TIMEOUT, interval=POLL)
            result.forget()

    for round_ in range(1, rounds + 1):
        with metered("fanout cpu", "switchyard", n):
            rows["fanout"].switchyard.append(_switchyard("bench_fan_out", {"n": n, "agent": agent}))
        rows["fanin"].switchyard.append(_switchyard("bench_fan_in", {"n": n, "agent": agent}))
        rows["chain"].switchyard.append(_switchyard("bench_chain", {"m": m, "agent": agent}))
        if has_backend:
            with metered("fanout cpu", "celery", n):
                rows["fanout"].celery.append(_celery(group(noops(n))))
            for fl in floors:  # beside the group, so the two are taken under the same conditions
                signature = _floor_tasks(app, agent, n, fl, group)
                with metered(f"{fl.key} cpu", "celery", n):
                    rows[fl.key].celery.append(_floor(signature, n, fl.history))
            rows["fanin"].celery.append(_celery(chord(noops(n), noop.clone())))
            rows["chain"].celery.append(_celery(chain(noops(m))))
            for fl in chain_floors:
                rows[f"chain {fl.key}"].celery.append(_floor(_floor_tasks(app, agent, m, fl, chain), m, False))
        for key in ("fanout", *(fl.key for fl in floors), "fanin", "chain", *(f"chain {fl.key}" for fl in chain_floors)):
            if key in rows:
                _progress(round_, rows[key])

        began = time.monotonic()
        with metered("starts cpu", "switchyard", k):
            rate, ids = _starts(client, k, agent)
            for execution_id in ids:  # untimed (but its CPU counted): let them finish before the next measurement
                _wait_completed(execution_id)
        starts_wall = time.monotonic() - began
        rows["starts"].switchyard.append(rate)
        began = time.monotonic()
        with metered("starts cpu", "celery", k):
            rate, results = _sends(app, k, agent)
            if has_backend:
                for result in results:
                    result.get(timeout=TIMEOUT, interval=POLL)
                    result.forget()
        sends_wall = time.monotonic() - began
        if not has_backend:
            time.sleep(1.0)
        rows["starts"].celery.append(rate)
        _progress(round_, rows["starts"])
        if "starts alone" in rows:
            with _frozen(processes):
                rate, ids = _starts(client, k, agent)
            rows["starts alone"].switchyard.append(rate)
            for execution_id in ids:
                _wait_completed(execution_id)
            with _frozen(processes):
                rate, results = _sends(app, k, agent)
            rows["starts alone"].celery.append(rate)
            if has_backend:
                for result in results:
                    result.get(timeout=TIMEOUT, interval=POLL)
                    result.forget()
            _progress(round_, rows["starts alone"])
        if "starts cpu" in meters:
            rows["starts cpu"].wall.setdefault("switchyard", []).append(starts_wall / k * 1000)
            rows["starts cpu"].wall.setdefault("celery", []).append(sends_wall / k * 1000)

    out = [rows["fanout"]]
    for fl in floors:
        fan_out, group_, floor_ = (statistics.median(values) for values in (
            rows["fanout"].switchyard, rows["fanout"].celery, rows[fl.key].celery))
        rows[fl.key].note = (f"Switchyard: the fan-out's. Fan-out / group {fan_out / group_:.2f}, {fl.short} / group "
                            f"{floor_ / group_:.2f}, fan-out / {fl.short} {fan_out / floor_:.2f}")
        out.append(rows[fl.key])
    out += [rows["fanin"], rows["chain"]]
    per_step = Row(f"chain: per step (total / {m}), ms", [v / m * 1000 for v in rows["chain"].switchyard],
                   [v / m * 1000 for v in rows["chain"].celery], unit="ms")
    out.append(per_step)
    for fl in chain_floors:
        row = rows[f"chain {fl.key}"]
        chain_, link_, floor_ = (statistics.median(values) for values in (
            rows["chain"].switchyard, rows["chain"].celery, row.celery))
        row.note = (f"Switchyard: the chain's. Per step: chain / chain link {chain_ / link_:.2f}, {fl.short} / chain "
                    f"link {floor_ / link_:.2f}, chain / {fl.short} {chain_ / floor_:.2f}")
        out.append(row)
    out.append(rows["starts"])
    if "starts alone" in rows:
        out.append(rows["starts alone"])
    if redis is not None:
        row = rows["fanout messages"]
        for side, counter in counters.items():
            getattr(row, side).extend(sample["pushed"] + sample["published"] for sample in counter.samples)
        row.note = "; ".join(f"{side.capitalize()}: {_messages(counter.samples)}" for side, counter in counters.items()
                             if counter.samples)
        out.append(row)
    if meters:
        rows["fanout cpu"].wall = {"switchyard": [v / n * 1000 for v in rows["fanout"].switchyard],
                                   "celery": [v / n * 1000 for v in rows["fanout"].celery]}
        for fl in floors:
            rows[f"{fl.key} cpu"].wall = {"celery": [v / n * 1000 for v in rows[fl.key].celery]}
        for key in ("fanout cpu", *(f"{fl.key} cpu" for fl in floors), "starts cpu"):
            if key not in meters:
                continue
            row = rows[key]
            for side, meter in meters[key].items():
                row.cpu[side] = meter.samples
                getattr(row, side).extend(sum(sample.values()) for sample in row.cpu[side])
            out.append(row)
    return out


def _progress(round_, row):
    """Each measurement as it is taken, on stderr: a long run shows where it is."""
    celery = f"{row.celery[-1]:.3f}" if row.celery else "n/a"
    print(f"round {round_}: {row.case}: Switchyard {row.switchyard[-1]:.3f}, Celery {celery} ({row.unit})",
          file=sys.stderr, flush=True)


def _fmt(values, unit):
    if not values:
        return "n/a"
    median = statistics.median(values)
    return f"{median:.1f}" if unit in ("/s", "ms") else f"{median:.2f}" if unit == "n" else f"{median:.3f}"


def report(rows):
    lines = ["| throughput case | Switchyard median | Celery median | ratio Switchyard / Celery | note |",
             "|---|---|---|---|---|"]
    for row in rows:
        sy, ce = _fmt(row.switchyard, row.unit), _fmt(row.celery, row.unit)
        ratio, note = "n/a", ""
        if row.switchyard and row.celery:
            a, b = statistics.median(row.switchyard), statistics.median(row.celery)
            ratio = f"{a / b:.2f}" if b else "n/a"
            if row.unit == "ms" and not row.cpu:
                note = f"Switchyard − Celery: {a - b:+.1f} ms per step"
        if row.cpu:
            note = "; ".join(f"{side.capitalize()}: {_breakdown(row, side)}" for side in ("switchyard", "celery")
                             if row.cpu.get(side))
        note = "; ".join(part for part in (row.note, note) if part)
        unit = {"s": "s", "/s": "starts/s", "ms": "ms", "n": "messages"}[row.unit]
        if row.unit == "/s":
            note = (note + " " if note else "") + "per second: higher is better"
        lines.append(f"| {row.case} ({unit}) | {sy} | {ce} | {ratio} | {note} |")
    return "\n".join(lines)


def _messages(samples) -> str:
    """The median messages pushed into queues and published, per operation."""
    pushed = statistics.median(sample["pushed"] for sample in samples)
    published = statistics.median(sample["published"] for sample in samples)
    return f"{pushed:.2f} pushed into queues, {published:.2f} published (events, broadcasts, result notices)"


@contextmanager
def _both(first, second):
    with first, second:
        yield


def _breakdown(row, side) -> str:
    """The median CPU of each part (ms) and how busy the cores were."""
    wall = statistics.median(row.wall[side]) if row.wall.get(side) else None
    return cpu.describe(cpu.median(row.cpu[side]), wall)


__all__ = ["run", "report", "DEFAULT_SIZES"]
