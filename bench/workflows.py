"""Workflows, operations and plain Celery tasks of the benchmarks (``SWITCHYARD_WORKFLOW_MODULES``
includes this module in every process a benchmark starts). Operations that run a process tree
write their pids to ``$SWITCHYARD_BENCH_DIR/<tag>.json`` for the benchmark to watch."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import kombu
from celery import shared_task
from celery.signals import worker_ready
from celery.worker.request import Request
from kombu.asynchronous import get_event_loop

from agents.worker import link
from workflows_app import db, wire
from workflows_app.broker import TASK_OPTIONS
from workflows_app.sdk import operation, workflow

BENCH_DIR_ENV = "SWITCHYARD_BENCH_DIR"
CELERY_STUBBORN = "bench.celery_stubborn"


def _tree(tag, ignore_sigterm):
    """Start ``sleep 1000`` (ignoring SIGTERM like this process, when asked), record both pids."""
    if ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen(["sleep", "1000"])
    path = Path(os.environ[BENCH_DIR_ENV]) / f"{tag}.json"
    path.write_text(json.dumps({"pid": os.getpid(), "child": child.pid}))
    child.wait()


@operation(name="bench_tree", max_retries=0)
def tree(ctx, tag, ignore_sigterm=False):
    _tree(tag, ignore_sigterm)


@operation(name="bench_cooperative", max_retries=0)
def cooperative(ctx, tag):
    """Runs until its execution is cancelled, looking every 50 ms."""
    Path(os.environ[BENCH_DIR_ENV], f"{tag}.json").write_text(json.dumps({"pid": os.getpid()}))
    while not ctx.is_cancelled():
        time.sleep(0.05)
    return "stopped"


@workflow(name="bench_one")
def one(ctx, op, tag, agent, ignore_sigterm=False):
    """One step: ``bench_tree`` or ``bench_cooperative``, then another that must never start."""
    operations = {"tree": tree, "cooperative": cooperative}
    kwargs = {"ignore_sigterm": ignore_sigterm} if op == "tree" else {}
    ctx.await_execute("step", operations[op], tag, agent=agent, **kwargs)
    ctx.await_execute("never", cooperative, f"{tag}-never", agent=agent)


@shared_task(name=CELERY_STUBBORN)
def celery_tree(tag, ignore_sigterm=False):
    """The same process tree as a plain Celery task."""
    _tree(tag, ignore_sigterm)


# --- throughput cases (bench/throughput.py) ----------------------------------------------

CELERY_NOOP = "bench.celery_noop"


@operation(name="bench_noop", max_retries=0)
def noop(ctx, i=0):
    """Does nothing: what is measured is the engine around it."""
    return None


@workflow(name="bench_fan_out")
def fan_out(ctx, n, agent):
    """``n`` independent no-op steps on ``agent``."""
    g = ctx.graph()
    for i in range(n):
        g.add(f"n{i:05d}", noop, i, agent=agent)
    g.run()


@workflow(name="bench_fan_in")
def fan_in(ctx, n, agent):
    """``n`` independent no-op steps on ``agent``, then one no-op after all of them."""
    g = ctx.graph()
    members = [g.add(f"n{i:05d}", noop, i, agent=agent) for i in range(n)]
    g.add("join", noop, n, agent=agent, depends_on=members)
    g.run()


@workflow(name="bench_chain")
def chain_of(ctx, m, agent):
    """``m`` no-op steps on ``agent``, each after the one before."""
    g = ctx.graph()
    previous = None
    for i in range(m):
        previous = g.add(f"c{i:05d}", noop, i, agent=agent, depends_on=[previous] if previous else [])
    g.run()


@workflow(name="bench_imperative_chain")
def imperative_chain(ctx, m, agent):
    """``m`` no-op steps on ``agent``, each awaited before the next is asked for: the
    imperative form of ``bench_chain``, where every step is a pass of the workflow function."""
    for i in range(m):
        ctx.await_execute(f"c{i:05d}", noop, i, agent=agent)


@workflow(name="bench_local_chain")
def local_chain(ctx, m):
    """``m`` no-op steps run inside the manager's pass (``local=True``: no message, no agent),
    each awaited before the next is asked for: ``bench_imperative_chain`` without the hop. The
    whole chain is one advance and a commit per step (bench/local_steps.py)."""
    for i in range(m):
        ctx.await_execute(f"s{i:05d}", noop, i, local=True)


@workflow(name="bench_single")
def single(ctx, agent):
    """One no-op step on ``agent`` (what the start-throughput case starts)."""
    ctx.await_execute("noop", noop, 0, agent=agent)


@shared_task(name=CELERY_NOOP, ignore_result=False)
def celery_noop(*args):
    """The plain Celery no-op; it keeps its result (the project ignores results by default): a
    group, chord or chain is waited on through the result backend."""
    return None


#: The durable floor's tables (PostgreSQL; ``bench/throughput.py`` creates, fills and drops them):
#: one row per operation, and the state events of the floor with its history.
FLOOR_TABLE = "bench_durable_floor"
FLOOR_EVENTS_TABLE = "bench_durable_floor_event"
CELERY_DURABLE_NOOP = "bench.celery_durable_noop"
CELERY_RECORDED_NOOP = "bench.celery_recorded_noop"
_CLAIM = f"UPDATE {FLOOR_TABLE} SET state = 'started' WHERE id = %s AND attempt = %s AND state = 'sent'"
_RESULT = (f"UPDATE {FLOOR_TABLE} SET state = 'succeeded', result = %s::jsonb "
           "WHERE id = %s AND attempt = %s AND state = 'started'")


def _recorded(update, source, target):
    """``update`` (one row, ``%s`` parameters) and its state event in one statement, as
    Switchyard writes a transition: the event's message and data as an operation's."""
    return (f"WITH moved AS ({update} RETURNING id, attempt) "
            f"INSERT INTO {FLOOR_EVENTS_TABLE} (row_id, type, message, data) "
            f"SELECT id, 'task_{target}', '{source} -> {target}', "
            f"jsonb_build_object('from', '{source}', 'to', '{target}', 'attempt', attempt) FROM moved")


def _durable(claim, result_statement, row_id, attempt):
    """A durable no-op's two commits: ``claim`` the attempt (nothing more when it is not
    ``sent``), then store its result with ``result_statement``."""
    result = None
    with db.cursor() as cursor:
        cursor.execute(claim, [row_id, attempt])
        if cursor.rowcount != 1:
            return None
        cursor.execute(result_statement, [json.dumps(result), row_id, attempt])
    return result


@shared_task(name=CELERY_DURABLE_NOOP, **{**TASK_OPTIONS, "ignore_result": False})
def celery_durable_noop(row_id, attempt):
    """A no-op that does only what Switchyard's guarantees ask of an operation's message: the
    durable floor. Its attempt is claimed in a committed statement before it runs (fencing: a
    second delivery changes no row and stops there), and its result committed before it
    returns, so before its late acknowledgement. Autocommit, on the pool process's kept
    connection, through the cursor Switchyard's own statements use (bound on the server,
    prepared once run often). It is acknowledged as an operation's message is
    (``TASK_OPTIONS``), and keeps its Celery result like ``celery_noop``: the group is waited on
    the same way."""
    return _durable(_CLAIM, _RESULT, row_id, attempt)


_CLAIM_RECORDED = _recorded(_CLAIM, "sent", "started")
_RESULT_RECORDED = _recorded(_RESULT, "started", "succeeded")


@shared_task(name=CELERY_RECORDED_NOOP, **{**TASK_OPTIONS, "ignore_result": False})
def celery_recorded_noop(row_id, attempt):
    """The durable floor with its history (every state change is stored with its
    event, in its transaction): each of the two commits also inserts its state event, in the
    same statement."""
    return _durable(_CLAIM_RECORDED, _RESULT_RECORDED, row_id, attempt)


CELERY_CLAIMED_NOOP = "bench.celery_claimed_noop"
#: The queue of the broker floor's reports: the benchmark's own responder (``bench/throughput.py``)
#: takes them, never a manager.
BROKER_FLOOR_QUEUE = "bench.broker-floor.reports"
#: How long a broker floor's claim waits for its answer before the round fails.
BROKER_FLOOR_CLAIM_SECONDS = 60.0


def broker_floor_queue():
    return kombu.Queue(BROKER_FLOOR_QUEUE, durable=True)  # on the default exchange, on both brokers


def broker_floor_route() -> dict:
    """Where a broker floor's reports are published: straight into its queue (``Link``'s route)."""
    return {"exchange": "", "routing_key": BROKER_FLOOR_QUEUE, "declare": [broker_floor_queue()]}


_broker_floor_links = {}


def _broker_floor_link():
    """This process' line to the responder (a pool process makes its own after the fork)."""
    pid = os.getpid()
    if pid not in _broker_floor_links:
        _broker_floor_links[pid] = link.Link(route=broker_floor_route)
    return _broker_floor_links[pid]


@shared_task(name=CELERY_CLAIMED_NOOP, **{**TASK_OPTIONS, "ignore_result": False})
def celery_claimed_noop(row_id, attempt):
    """The broker floor: a no-op that does what an agent does for an operation, through the
    agent's own line to the managers (``agents.worker.link.Link``), with no engine behind it. It
    claims its attempt and waits for the answer (no answer, no run), runs, and reports its outcome
    before it returns (so before its late acknowledgement). The responder stores each batch of
    claims and outcomes in one transaction with one statement each, and answers the claims once
    it committed, as a manager's inbox does."""
    line = _broker_floor_link()
    answer = line.claim(row_id, attempt, BROKER_FLOOR_CLAIM_SECONDS)
    if answer is None or answer.get("verdict") != wire.Verdict.RUN:
        raise RuntimeError(f"broker floor: the claim of row {row_id} was answered {answer!r}")
    line.report(wire.Kind.OUTCOME, operation=str(row_id), attempt=attempt, outcome=wire.Outcome.SUCCEEDED, result=None)
    return None


CELERY_REPORTED_NOOP = "bench.celery_reported_noop"


@shared_task(name=CELERY_REPORTED_NOOP, **{**TASK_OPTIONS, "ignore_result": False})
def celery_reported_noop(row_id, attempt):
    """The lean floor: a no-op that asks nobody before it runs — as an agent would whose message
    carries the manager's grant, stored when it was sent — and reports its start and its outcome
    together, in one report, before it returns (so before its late acknowledgement). The least a
    design that speaks through the broker can do for an operation: its message, and one report,
    stored by the responder in batches."""
    _broker_floor_link().report(wire.Kind.OUTCOME, operation=str(row_id), attempt=attempt,
                                outcome=wire.Outcome.SUCCEEDED, result=None, started=True)
    return None


CELERY_BATCHED_NOOP = "bench.celery_batched_noop"
#: The most reports the batched floor's agent puts in one message.
BATCHED_REPORTS_MAX = 100


class _BatchedReports(Request):
    """The batched floor's request, in the agent's main process: its message is acknowledged only
    once its report left, in one message with the reports of the other tasks that ended by the
    next turn of the worker's event loop (up to ``BATCHED_REPORTS_MAX``). Meanwhile the worker
    may take one more message for each report waiting (its prefetch count raised by one until the
    acknowledgement), or a pool process would wait for the batch of the task it ended."""

    pending = []  # (row id, attempt, request) of the tasks ended and not reported yet
    consumer = None  # the worker's consumer (``worker_ready``), whose prefetch count this moves

    def acknowledge(self):
        if not _BatchedReports.pending:
            get_event_loop().call_soon(_BatchedReports.flush)
        _BatchedReports.pending.append((self.args[0], self.args[1], self))
        _BatchedReports.consumer.qos.increment_eventually()

    @staticmethod
    def flush():
        while _BatchedReports.pending:
            batch = _BatchedReports.pending[:BATCHED_REPORTS_MAX]
            del _BatchedReports.pending[:BATCHED_REPORTS_MAX]
            _broker_floor_link().report("batch", reports=[[str(row_id), attempt] for row_id, attempt, _ in batch])
            for _, _, request in batch:
                Request.acknowledge(request)
            _BatchedReports.consumer.qos.decrement_eventually(len(batch))


@worker_ready.connect
def _keep_consumer(sender=None, **kwargs):
    _BatchedReports.consumer = sender


@shared_task(name=CELERY_BATCHED_NOOP, Request=_BatchedReports, **{**TASK_OPTIONS, "ignore_result": False})
def celery_batched_noop(row_id, attempt):
    """The batched floor: the lean floor's no-op, but its pool process publishes nothing — it
    returns, and the agent's main process reports it with the others that ended at the same time,
    in one message, before it acknowledges their messages (``_BatchedReports``). What reports of
    several operations to a message would cost."""
    return None


# --- suspended scale (bench/suspended.py) ------------------------------------------------


@workflow(name="bench_wait_event")
def wait_event(ctx, run=""):
    """Waits (durably: no thread, no process) for the event ``go``; keeps and returns its payload.
    ``run`` tells one benchmark run's executions from another's."""
    payload = ctx.await_event("go")
    ctx.set_payload({"go": payload})
    return payload


# --- child executions (bench/children.py) -------------------------------------------------------

@workflow(name="bench_child")
def child(ctx, agent):
    """A child execution of one no-op step."""
    ctx.await_execute("noop", noop, agent=agent)


@workflow(name="bench_children")
def children(ctx, n, agent):
    """``n`` children (``bench_child``) started at once, then awaited together."""
    ctx.all_of(*[ctx.execute_workflow(f"c{i:05d}", child, agent=agent) for i in range(n)]).wait()
