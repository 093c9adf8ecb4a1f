"""Executions waiting on an event (issue 7, case 5; issue 19, target 2): their memory, and how
fast they wake when few or many wait.

1. For each size W of ``waiting``, smallest first, the executions waiting in total are made W
   by cloning one started through the engine in bulk (:func:`clone_waiting`: the rows the engine
   wrote for it, new ids and token), the tables are analysed, and ``deliveries`` of them (all W
   when fewer), taken at random, get their event one after another through
   ``services.send_event`` (what ``POST /executions/{id}/events`` calls); the time until all of
   them are ``completed`` gives the wake rate. The database bytes per waiting execution (its
   rows and their index entries) and the tick's pass with W waiting (in this process, the sweep
   for lost wake-ups included) are measured too.
2. Last, on top of those still waiting, ``started`` executions are started through
   ``services.start`` and suspend on ``ctx.await_event("go")``; the time until all wait is
   taken, and the RSS of the manager and agent process trees (each process and its Celery pool
   processes) before, once the first ``FIRST`` wait, and once all wait. The first fill what
   does not grow with the number waiting: each dispatcher process's live runs (at most
   ``WORKFLOW_CACHE_SIZE``, ``engine/live.py``) and the buffers of a burst of starts. What each
   further one adds, (all − first) / (``started`` − ``FIRST``), is the memory a waiting
   execution holds in them (a waiting execution is rows, no thread or process: about 0). A
   clone never passes through the processes, so it cannot show this.

Plain Celery has no durable wait: a task that waits for an event holds a worker slot — a pool
process — for as long as it waits. Its memory column is that cost: the RSS of one idle pool
process of the agent per waiting run (nothing is run for it). Its wake column, when a result
backend and the agent's queue are given, is the rate of as many no-op tasks sent one after
another and run on the agent: what a message per wake-up costs without durability.
"""

import random
import statistics
import time
import uuid

import psutil
from django.db import connection, transaction
from django.utils import timezone

from bench.workflows import CELERY_NOOP
from workflows_app import services
from workflows_app.conf import workflows_settings
from workflows_app.engine import tick
from workflows_app.models import Event, Execution, Wait
from workflows_app.models.execution import hash_token, new_token
from switchyard.celery import app
from workflows_app.states import EventType, ExecutionStatus

#: The workflow every execution of the case runs (``bench/workflows.py``).
WORKFLOW = "bench_wait_event"
POLL = 0.05
TIMEOUT = 1800.0
#: Starts per transaction: their advances are sent when it commits.
BATCH = 500
#: Ids per query when the woken executions are checked.
CHUNK = 1000
DEFAULT_WAITING = (1_000, 100_000)
DEFAULT_DELIVERIES = 10_000
DEFAULT_STARTED = 10_000
#: Of those started, the first ones: they fill the live-run caches (at most ``WORKFLOW_CACHE_SIZE``
#: a dispatcher process) and the buffers of a burst, which do not grow with the number waiting.
FIRST = 1_000
#: Tick passes timed at each size (their median is reported).
TICK_PASSES = 5


def tree_rss(pid) -> int:
    """RSS in bytes of a process and every process below it (its Celery pool processes)."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


def pool_process_rss(pid) -> int:
    """RSS of one idle pool process of the worker ``pid``: the median of its leaf processes."""
    try:
        leaves = [p for p in psutil.Process(pid).children(recursive=True) if not p.children()]
        values = [p.memory_info().rss for p in leaves]
    except psutil.NoSuchProcess:
        values = []
    return int(statistics.median(values)) if values else 0


def _wait_until(count, what, timeout=TIMEOUT):
    """Poll ``count()`` until it returns True; the seconds it took."""
    began = time.monotonic()
    while not count():
        if time.monotonic() - began > timeout:
            raise TimeoutError(f"benchmark: {what} not reached after {timeout} s")
        time.sleep(POLL)
    return time.monotonic() - began


def clone_waiting(template_id, count) -> list:
    """``count`` copies of the waiting execution ``template_id``, in one transaction of four
    statements; their ids.

    Each copy is the rows the engine wrote for the template — its execution row (``started``),
    its stored waits and its events — column for column, but for the copy's own id, its own
    token (the hash of a new random token, as ``renew_token`` stores) and the new ids of its
    wait and event rows. Timestamps are the template's. Nothing is sent: the copies wait as the
    template does, until an event's advance or the tick moves them."""
    q = connection.ops.quote_name
    execution, wait, event = Execution._meta, Wait._meta, Event._meta
    columns = {model: [f.column for f in model._meta.concrete_fields if f.column not in ("id", "execution_id", "token_hash")]
               for model in (Execution, Wait, Event)}
    template = execution.pk.get_db_prep_value(template_id, connection)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"CREATE TEMPORARY TABLE bench_clone AS SELECT {q('id')}, {q('token_hash')} "
                       f"FROM {q(execution.db_table)} WHERE 1 = 0")
        if connection.vendor == "postgresql":
            cursor.execute("INSERT INTO bench_clone SELECT gen_random_uuid(), "
                           "encode(sha256(gen_random_uuid()::text::bytea), 'hex') FROM generate_series(1, %s)", [count])
        else:
            rows = [(execution.pk.get_db_prep_value(uuid.uuid4(), connection), hash_token(new_token()))
                    for _ in range(count)]
            cursor.executemany("INSERT INTO bench_clone VALUES (%s, %s)", rows)
        cols = columns[Execution]
        cursor.execute(f"INSERT INTO {q(execution.db_table)} (id, token_hash, {', '.join(map(q, cols))}) "
                       f"SELECT c.id, c.token_hash, {', '.join('t.' + q(c) for c in cols)} "
                       f"FROM bench_clone c, {q(execution.db_table)} t WHERE t.id = %s", [template])
        for model, meta in ((Wait, wait), (Event, event)):
            cols = columns[model]
            cursor.execute(f"INSERT INTO {q(meta.db_table)} (execution_id, {', '.join(map(q, cols))}) "
                           f"SELECT c.id, {', '.join('t.' + q(c) for c in cols)} "
                           f"FROM bench_clone c, {q(meta.db_table)} t WHERE t.execution_id = %s ORDER BY c.id, t.id",
                           [template])
        cursor.execute("SELECT id FROM bench_clone")
        ids = [execution.pk.to_python(row[0]) for row in cursor.fetchall()]
        cursor.execute("DROP TABLE bench_clone")
    return ids


def database_bytes():
    """The size of the execution, wait and event tables with their indexes (PostgreSQL; else None)."""
    if connection.vendor != "postgresql":
        return None
    tables = [model._meta.db_table for model in (Execution, Wait, Event)]
    with connection.cursor() as cursor:
        cursor.execute("SELECT sum(pg_total_relation_size(t::regclass)) FROM unnest(%s::text[]) AS t", [tables])
        return int(cursor.fetchone()[0])


def analyse():
    """What autovacuum would do, later, to the tables a bulk clone filled: fresh planner
    statistics and, on PostgreSQL, the new rows marked visible (index-only scans need not read
    them)."""
    command = "VACUUM ANALYZE" if connection.vendor == "postgresql" else "ANALYZE"
    with connection.cursor() as cursor:
        for model in (Execution, Wait, Event):
            cursor.execute(f"{command} {connection.ops.quote_name(model._meta.db_table)}")


def tick_pass_ms():
    """The engine's tick in this process, in milliseconds: the median of TICK_PASSES passes as
    most are, and of as many with the sweep for lost wake-ups (one pass in SWEEP_EVERY_SECONDS)."""
    plain, sweep = [], []
    for _ in range(TICK_PASSES):
        for passes in (sweep, plain):
            tick._last_sweep = None if passes is sweep else timezone.now()
            began = time.monotonic()
            tick.run()
            passes.append((time.monotonic() - began) * 1000)
    return statistics.median(plain), statistics.median(sweep)


def _waiting(tag):
    """How many executions of the run ``tag`` (started through the engine) wait on their wait."""
    return Wait.objects.filter(execution__workflow_id=WORKFLOW, execution__parameters__run=tag,
                               execution__status=ExecutionStatus.STARTED).count()


def _completed_since(mark):
    """Executions completed since the event ``mark`` (on the index of events by type and id)."""
    return Event.objects.filter(id__gt=mark, type=EventType.WORKFLOW_COMPLETED).count()


def _last_event_id():
    return Event.objects.order_by("-id").values_list("id", flat=True).first() or 0


def _wake(targets):
    """Deliver ``go`` to each of ``targets``, one after another; (seconds until all completed,
    seconds of the delivery alone)."""
    mark = _last_event_id()
    began = time.monotonic()
    for i, execution_id in enumerate(targets):
        services.send_event(execution_id, "go", {"i": i})
    delivered = time.monotonic() - began
    _wait_until(lambda: _completed_since(mark) >= len(targets), f"{len(targets)} executions woken and completed")
    seconds = time.monotonic() - began
    for first in range(0, len(targets), CHUNK):
        chunk = Execution.objects.filter(pk__in=targets[first:first + CHUNK])
        if chunk.filter(status=ExecutionStatus.COMPLETED, payload__go__has_key="i").count() != len(targets[first:first + CHUNK]):
            raise RuntimeError("benchmark: a woken execution did not complete with its event's payload")
    return seconds, delivered


def _celery_rate(agent, count):
    """``count`` no-op tasks sent one after another to ``agent``'s queue, per second until all
    their results are in; None without a result backend."""
    if not app.conf.result_backend:
        return None
    began = time.monotonic()
    results = [app.send_task(CELERY_NOOP, args=[i], queue=agent) for i in range(count)]
    for result in results:
        result.get(timeout=TIMEOUT, interval=POLL)
        result.forget()
    return count / (time.monotonic() - began)


def _start_waiting(tag, count, already):
    """Start ``count`` executions of the run ``tag`` (``already`` of them wait), ``BATCH`` to a
    transaction, and return their ids once all of them wait."""
    ids = []
    for first in range(0, count, BATCH):
        with transaction.atomic():
            ids += [services.start(WORKFLOW, {"run": tag}).pk for _ in range(first, min(count, first + BATCH))]
    _wait_until(lambda: _waiting(tag) == already + count, f"{already + count} executions suspended on their wait")
    return ids


def _settled_rss(pids) -> int:
    """The RSS of the trees of ``pids``, the workers given a second to settle after a burst."""
    time.sleep(1.0)
    return sum(tree_rss(pid) for pid in pids)


def run(stack, processes, waiting=DEFAULT_WAITING, *, deliveries=DEFAULT_DELIVERIES, started=DEFAULT_STARTED,
        agent=None):
    """Measure the case; ``processes``: the manager's and the agent's ``StackProcess``;
    ``waiting``: the sizes (one number: one size); ``agent``: the agent's queue, for the Celery
    column of the wake rates; ``started``: the executions started through the engine, last, for
    the memory. Returns the rows of :func:`report`."""
    tag = uuid.uuid4().hex[:8]
    pids = [p.pid for p in processes]
    waiting = sorted([waiting] if isinstance(waiting, int) else waiting)
    if started < 2 or deliveries < 1:
        raise ValueError("benchmark: at least two executions started and one delivery")

    # Warm up (imports, connections, pool processes) with one execution, untimed.
    warm = services.start(WORKFLOW, {"run": f"{tag}-warm"})
    _wait_until(lambda: Wait.objects.filter(execution_id=warm.pk).exists(), "the warm-up wait")
    services.send_event(warm.pk, "go", "warm")
    _wait_until(lambda: Execution.objects.filter(pk=warm.pk, status=ExecutionStatus.COMPLETED).exists(), "the warm-up")

    mb = 1024 * 1024
    rows, rates, pool = [], {}, []
    for size in waiting:
        if not pool:  # all woken: one more, through the engine, to clone
            pool = _start_waiting(tag, 1, 0)
        size_before = database_bytes()
        began = time.monotonic()
        cloned = clone_waiting(pool[0], size - len(pool)) if size > len(pool) else []
        analyse()
        clone_seconds = time.monotonic() - began
        size_after = database_bytes()
        if cloned and size_before is not None:
            rows.append((f"suspended: database bytes per waiting execution, {size} waiting",
                         (size_after - size_before) / len(cloned), None,
                         "its execution, wait and event rows with their index entries, from the tables' growth"))
        pool += cloned
        random.shuffle(pool)
        targets, pool = pool[:deliveries], pool[deliveries:]
        tick_ms, sweep_ms = tick_pass_ms()
        seconds, delivered = _wake(targets)
        rates[size] = len(targets) / seconds
        celery = _celery_rate(agent, len(targets)) if agent else None
        rows += [
            (f"tick: one pass with {size} waiting (ms)", tick_ms, None,
             f"median of {TICK_PASSES} passes of the engine's tick, in the benchmark's process; with the sweep for lost "
             f"wake-ups (one pass in {tick.SWEEP_EVERY_SECONDS} s): {sweep_ms:.1f} ms"),
            (f"wake: {len(targets)} events delivered until all completed, {size} waiting (s)", seconds, None,
             f"delivery alone {delivered:.1f} s (services.send_event, one by one); {len(cloned)} of those waiting cloned "
             f"in {clone_seconds:.1f} s"),
            (f"wake: executions woken per second, {size} waiting (/s)", rates[size], celery,
             "higher is better; Celery: as many no-op tasks sent one by one to the agent and run, per second"),
        ]
    if len(rates) > 1:
        fewest, most = waiting[0], waiting[-1]
        rows.append((f"wake: rate with {most} waiting / rate with {fewest} waiting", rates[most] / rates[fewest], None,
                     "target: at least 0.67 (within 1.5×)"))

    # Memory, last: ``started`` more through the engine, on top of those still waiting.
    still = len(pool)
    before = _settled_rss(pids)
    first = min(FIRST, started // 2)
    began = time.monotonic()
    _start_waiting(f"{tag}-memory", first, 0)
    suspend_seconds = time.monotonic() - began
    filled = _settled_rss(pids)
    began = time.monotonic()
    _start_waiting(f"{tag}-memory", started - first, first)
    suspend_seconds += time.monotonic() - began
    after = _settled_rss(pids)
    per_pool_process = pool_process_rss(processes[-1].pid)
    rows += [
        (f"suspended: RSS of manager + agent trees, {still} waiting (MB)", before / mb, None,
         "after the wake-ups above; a clone never passed through the processes"),
        (f"suspended: RSS once the first {first} started wait (MB)", filled / mb, None,
         f"+{(filled - before) / mb:.1f} MB: the live runs each dispatcher process keeps (at most "
         f"WORKFLOW_CACHE_SIZE = {workflows_settings.WORKFLOW_CACHE_SIZE} each) and a burst's buffers, which do not grow "
         "with the number waiting"),
        (f"suspended: RSS once all {started} started wait (MB)", after / mb, (before + started * per_pool_process) / mb,
         f"Celery: that RSS + {started} × one pool process ({per_pool_process / mb:.1f} MB), a task blocked in a worker "
         "per waiting run"),
        ("suspended: memory per waiting execution (bytes)", (after - filled) / (started - first), per_pool_process,
         f"Switchyard: what each started after the first {first} adds, (all − first) / {started - first}; over all "
         f"{started}, the fixed part included: {(after - before) / started:,.0f} B; Celery: one worker slot each"),
        (f"suspended: {started} starts until all wait (s)", suspend_seconds, None,
         f"services.start, {BATCH} to a transaction; manager concurrency as above"),
    ]
    return rows


def report(rows):
    lines = ["| suspended case | Switchyard | plain Celery | ratio Switchyard / Celery | note |",
             "|---|---|---|---|---|"]
    for case, switchyard, celery, note in rows:
        ratio = f"{switchyard / celery:.4f}" if celery else "n/a"
        lines.append(f"| {case} | {_fmt(switchyard)} | {_fmt(celery)} | {ratio} | {note} |")
    return "\n".join(lines)


def _fmt(value):
    if value is None:
        return "n/a"
    if abs(value) < 10:
        return f"{value:,.2f}"
    return f"{value:,.1f}" if abs(value) < 1e6 else f"{value:,.0f}"


__all__ = ["run", "report", "clone_waiting"]
