"""``python -m bench.limits [--rate-steps N] [--concurrency-steps C] [--sleep S] [--agent-concurrency A]
[--rounds R] [--waiting N,N…] [--cost-rounds K] [--skip-live]``: the limits of operations
(``@operation(rate_limit=…, concurrency=…)``, kept by the managers' gate, ``workflows_app.flow.gate``),
measured three ways:

1. Rate: one execution whose graph is N (default 1,000) independent no-op steps of an operation
   with ``rate_limit="200/s"``, on a real manager and agent. From the steps' stored
   ``sending_at``: the most sends in any one-second window (the limit: 200, never more), and the
   achieved rate, (N − 200) / (last ``sending_at`` − first) (the first window's 200 go at once),
   as a ratio to 200/s (target ≥ 0.95); and the wall time from the start until the execution
   completed. Beside it, plain Celery's ``rate_limit="200/s"`` task option on a ``group`` of N
   no-ops on the same worker (the agent's queue and pool): each task returns when it ran, the same
   two figures are taken from those times (a token bucket of one: no first burst, so its rate is
   (N − 1) / (last − first)). Celery's limit is kept by each worker on its own, not across
   workers.
2. Concurrency: one execution of C (default 200) independent steps each sleeping S (default
   50 ms) of an operation with ``concurrency=10``, on an agent of A (default 12) pool processes.
   From each step's stored [``sending_at``, ``succeeded_at``] (the span it holds a slot): the most
   at once (never more than 10), and the time from the first send until the last success against
   the ideal C × S / 10. Beside it, a plain Celery ``group`` of C such sleeps on the same pool:
   plain Celery has no limit of a task's concurrency, so this is the pool's own (at most A).
3. Cost of a send under a limit: in this process, on the database, in one transaction rolled back
   at the end (it leaves nothing behind): the time and the queries of one ``gate.drain`` — a slot
   of the concurrency key freed, one step sent; a rate window moved on, 200 sent — with 0, 1,000
   and 10,000 steps of the same operation waiting on the key behind those it sends (made in bulk
   as ``gate.stamp`` keys them, ``flow_wait`` set, the planner's statistics taken before each
   case), against sending as many steps of an operation without a limit
   (``progress.send_admitted`` under the execution's lock, what the engine does when no gate
   holds a step). The messages a send would publish once committed are not published (nothing is
   committed). Inside the transaction a drain's own transactions are savepoints: the
   ``SAVEPOINT``/``RELEASE`` statements counted stand for the ``BEGIN``/``COMMIT`` of a real one.

Runs against whatever ``DATABASE_URL`` and ``CELERY_BROKER_URL`` say (PostgreSQL and Redis are the
case that matters), migrating the database first; 1 and 2 start a manager (concurrency 2) and an
agent (concurrency A) whose processes load ``bench.limit_workflows``, and remove every execution
they ran once those processes are gone. Prints a markdown table (the medians of R rounds; the most
sends in a window and the most at once are the largest of any round), each round's figures on
stderr as they are taken.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

from bench import increasing_sizes

#: The modules the benchmark's processes (and this one) load.
MODULES = "bench.limit_workflows"
POLL = 0.005
TIMEOUT = 300.0
#: How long plain Celery's side of a case may take before it is left out.
CELERY_TIMEOUT = 120.0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.limits", description=__doc__.splitlines()[0])
    parser.add_argument("--rate-steps", type=int, default=1000, help="N: steps of the rate case")
    parser.add_argument("--concurrency-steps", type=int, default=200, help="C: steps of the concurrency case")
    parser.add_argument("--sleep", type=float, default=0.05, help="S: seconds each step of the concurrency case sleeps")
    parser.add_argument("--agent-concurrency", type=int, default=12, help="A: the agent's pool processes")
    parser.add_argument("--rounds", type=int, default=3, help="R: rounds of the rate and concurrency cases")
    parser.add_argument("--waiting", type=increasing_sizes, default=(1_000, 10_000),
                        help="N,N…: steps waiting on the key at each measurement of the cost (0 is always measured first)")
    parser.add_argument("--cost-rounds", type=int, default=20, help="K: rounds of each cost measurement")
    parser.add_argument("--skip-live", action="store_true", help="only the cost (no manager, no agent)")
    args = parser.parse_args(argv)
    if min(args.rate_steps, args.concurrency_steps, args.agent_concurrency, args.rounds, args.cost_rounds) < 1 \
            or args.sleep < 0:
        parser.error("the numbers of steps, processes and rounds must be at least 1, --sleep at least 0")

    suffix = uuid.uuid4().hex[:8]
    workflows = {"MANAGEMENT_QUEUE": f"bench-limits-mgmt-{suffix}", "KILL_GRACE_SECONDS": 1,
                 "AGENT_HEARTBEAT_SECONDS": 1, "AGENT_OFFLINE_AFTER_SECONDS": 10}
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchyard.settings")
    os.environ.setdefault("DJANGO_DEBUG", "false")
    os.environ["SWITCHYARD_WORKFLOW_MODULES"] = MODULES
    os.environ["SWITCHYARD_WORKFLOWS"] = json.dumps(workflows)
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)
    load_before = os.getloadavg()[0]
    costs = _costs(args.waiting, args.cost_rounds)
    live = None if args.skip_live else _live(args, workflows, suffix)

    header = (f"{datetime.now(timezone.utc):%Y-%m-%d}, {platform.machine()} {os.cpu_count()} cores, "
              f"{connection.vendor}, broker {settings.CELERY_BROKER_URL.split(':')[0]}, "
              f"`python -m bench.limits{' ' + ' '.join(sys.argv[1:]) if argv is None and sys.argv[1:] else ''}`, "
              f"one manager of concurrency 2, one agent of concurrency {args.agent_concurrency}, "
              f"Django DEBUG {'on' if settings.DEBUG else 'off'}, the machine's load average (1 min) "
              f"{load_before:.1f} at the start and {os.getloadavg()[0]:.1f} at the end")
    sections = [header]
    if live:
        sections.append(_live_report(live, args))
    sections.append(_cost_report(costs, args.cost_rounds, connection.vendor))
    print("\n\n".join(sections))


# --- 1 and 2: a manager and an agent --------------------------------------------------------

def _live(args, workflows, suffix):
    from bench import limit_workflows
    from tests.integration.harness import Stack, ensure_broker
    from workflows_app import retention
    from workflows_app.models import ConcurrencyKey, Execution, RateSend

    ensure_broker()
    results = {}
    with tempfile.TemporaryDirectory(prefix="switchyard-bench-limits-") as tmp:
        markers = Path(tmp) / "markers"
        markers.mkdir()
        stack = Stack(tmp, suffix=suffix, workflows=workflows, markers_dir=markers,
                      extra_env={"SWITCHYARD_WORKFLOW_MODULES": MODULES})
        failed = True
        try:
            stack.start_manager(concurrency=2)
            agent = stack.agent_name("bench-limits-agent")
            stack.start_agent(agent, concurrency=args.agent_concurrency)
            stack.wait_for_agent(agent)
            results = _rounds(args, agent)
            failed = False
        finally:
            stack.close(failed=failed, out=sys.stderr)
            names = ["bench_lim_rate_fan_out", "bench_lim_slots_fan_out"]
            removed = retention.discard(Execution.objects.filter(workflow_id__in=names)).executions
            RateSend.objects.filter(key__startswith="rate:bench_lim_").delete()
            ConcurrencyKey.objects.filter(key__in=[f"operation:{limit_workflows.rated.name}",
                                                   f"operation:{limit_workflows.slotted.name}"]).delete()
            print(f"removed the {removed} executions the benchmark ran", file=sys.stderr)
    return results


def _rounds(args, agent):
    from celery import group

    from bench.limit_workflows import CELERY_RATED, CELERY_SLEEP, CONCURRENCY, RATE_COUNT
    from switchyard.celery import app

    has_backend = bool(app.conf.result_backend)
    n, c, s = args.rate_steps, args.concurrency_steps, args.sleep
    out = {"rate": [], "rate celery": [], "slots": [], "slots celery": []}

    # Warm up (imports, connections, pool processes), untimed; then let the rate window empty.
    _run("bench_lim_rate_fan_out", {"n": 3, "agent": agent})
    _run("bench_lim_slots_fan_out", {"n": 3, "seconds": 0.0, "agent": agent})
    if has_backend:
        _celery(group([app.signature(CELERY_RATED, args=(i,), queue=agent) for i in range(3)]))
        _celery(group([app.signature(CELERY_SLEEP, args=(0.0,), queue=agent) for _ in range(3)]))
    time.sleep(1.5)

    for round_ in range(1, args.rounds + 1):
        wall, execution_id = _run("bench_lim_rate_fan_out", {"n": n, "agent": agent})
        sends = _stored(execution_id, "sending_at")
        rate = _rate_figures(sends, RATE_COUNT, wall)
        rate["by instant"] = _instants(sends)
        instants = sorted(set(sends))
        rate["gap"] = (instants[-1] - instants[0]) / (len(instants) - 1) if len(instants) > 1 else 0.0
        out["rate"].append(rate)
        _say(round_, f"rate, {n} steps", rate)
        print(f"  sends by instant (s after the first: count): {rate['by instant']}", file=sys.stderr, flush=True)
        celery = has_backend and _celery(group([app.signature(CELERY_RATED, args=(i,), queue=agent)
                                                for i in range(n)]), queue=agent)
        if celery:
            wall, ran = celery
            figures = _rate_figures(sorted(ran), 1, wall)
            out["rate celery"].append(figures)
            _say(round_, f"Celery rate_limit, group of {n}", figures)
        time.sleep(1.5)  # the window of the last sends moves on: the next round starts on an empty one

        wall, execution_id = _run("bench_lim_slots_fan_out", {"n": c, "seconds": s, "agent": agent})
        spans = list(zip(_stored(execution_id, "sending_at"), _stored(execution_id, "succeeded_at", order="sending_at")))
        running = list(zip(_stored(execution_id, "started_at", order="sending_at"),
                           _stored(execution_id, "succeeded_at", order="sending_at")))
        figures = {"most at once": _most_at_once(spans), "most running": _most_at_once(running),
                   "hold": statistics.median(b - a for a, b in spans), "refill": _refill(spans, CONCURRENCY),
                   "span": max(b for _, b in spans) - min(a for a, _ in spans), "wall": wall}
        out["slots"].append(figures)
        _say(round_, f"concurrency, {c} steps of {s * 1000:.0f} ms", figures)
        celery = has_backend and _celery(group([app.signature(CELERY_SLEEP, args=(s,), queue=agent)
                                                for _ in range(c)]), queue=agent)
        if celery:
            wall, ran = celery
            figures = {"most at once": _most_at_once(ran), "span": max(b for _, b in ran) - min(a for a, _ in ran),
                       "wall": wall}
            out["slots celery"].append(figures)
            _say(round_, f"Celery group of {c} sleeps", figures)
    return out


def _run(workflow_id, parameters):
    """Start ``workflow_id`` and wait until it completed: (seconds, its id)."""
    from workflows_app import services
    from workflows_app.models import Execution

    asked = time.monotonic()
    execution = services.start(workflow_id, parameters)
    while True:
        status = Execution.objects.filter(pk=execution.pk).values_list("status", flat=True).get()
        if status == "completed":
            return time.monotonic() - asked, execution.pk
        if status in ("failed", "cancelled", "timed_out"):
            raise RuntimeError(f"benchmark execution {execution.pk} ended {status}")
        if time.monotonic() - asked > TIMEOUT:
            raise TimeoutError(f"benchmark execution {execution.pk} still {status} after {TIMEOUT} s")
        time.sleep(max(POLL, min(0.05, (time.monotonic() - asked) / 100)))


def _celery(signature, queue=None):
    """(seconds until every result of ``signature`` is in, the results); None when they are not
    all in after CELERY_TIMEOUT (Celery's ``rate_limit`` on Redis has been seen to take tasks at
    under one a second): what is left in ``queue`` is purged, and the case says so."""
    from celery.exceptions import TimeoutError as CeleryTimeout

    asked = time.monotonic()
    result = signature.apply_async()
    try:
        values = result.get(timeout=CELERY_TIMEOUT, propagate=True, interval=POLL)
    except CeleryTimeout:
        done = result.completed_count()
        print(f"  plain Celery: {done} of {len(result.results)} done after {CELERY_TIMEOUT:.0f} s: left out",
              file=sys.stderr, flush=True)
        if queue is not None:
            with signature.app.connection_for_write() as connection:
                connection.default_channel.queue_purge(queue)
        return None
    elapsed = time.monotonic() - asked
    result.forget()
    return elapsed, values


def _stored(execution_id, field, order=None):
    """The stored time ``field`` (epoch seconds) of every step of the execution, in the order of
    ``order`` (default: ``field``)."""
    from workflows_app.models import Operation

    rows = (Operation.objects.filter(execution_id=execution_id, kind="operation")
            .order_by(order or field, "id").values_list(field, flat=True))
    values = list(rows)
    if any(value is None for value in values):
        raise RuntimeError(f"execution {execution_id}: {sum(v is None for v in values)} steps without {field}")
    return [value.timestamp() for value in values]


def _rate_figures(times, burst, wall):
    """The most sends in any one-second window, the achieved rate ((count − the first window's
    ``burst``) / the time from the first to the last), and the wall time."""
    times = sorted(times)
    span = times[-1] - times[0]
    achieved = (len(times) - burst) / span if span > 0 else float("inf")
    return {"most in 1 s": _most_in_window(times, 1.0), "rate": achieved, "wall": wall, "span": span}


def _most_in_window(times, seconds):
    """The most of ``times`` (sorted) in any window [t, t + seconds)."""
    best, first = 0, 0
    for last, at in enumerate(times):
        while at - times[first] >= seconds:
            first += 1
        best = max(best, last - first + 1)
    return best


def _most_at_once(spans):
    """The most of the [begin, end] spans that overlap at one instant (one that ends at the
    instant another begins does not overlap it)."""
    edges = sorted([(b, 1) for b, _ in spans] + [(e, -1) for _, e in spans])
    best = now = 0
    for _, change in edges:
        now += change
        best = max(best, now)
    return best


def _refill(spans, limit):
    """The median time from a slot freed to the next send: the (limit + k)-th send (from 0) needs
    k + 1 attempts ended, so it is timed from the (k + 1)-th success."""
    sends, ends = sorted(a for a, _ in spans), sorted(b for _, b in spans)
    gaps = [sends[limit + k] - ends[k] for k in range(len(sends) - limit)]
    return statistics.median(gaps) if gaps else 0.0


def _instants(times):
    """The distinct send times and how many were sent at each, as "+0.000: 200, +1.012: 200"."""
    counts = {}
    for at in times:
        counts[at] = counts.get(at, 0) + 1
    first = min(counts)
    shown = [f"+{at - first:.3f}: {count}" for at, count in sorted(counts.items())]
    return ", ".join(shown if len(shown) <= 30 else shown[:30] + [f"… ({len(shown)} instants)"])


def _say(round_, case, figures):
    shown = ", ".join(f"{key} {value:.3f}" if isinstance(value, float) else f"{key} {value}"
                      for key, value in figures.items() if key != "by instant")
    print(f"round {round_}: {case}: {shown}", file=sys.stderr, flush=True)


def _live_report(live, args):
    from bench.limit_workflows import CONCURRENCY, RATE, RATE_COUNT

    n, c, s, a = args.rate_steps, args.concurrency_steps, args.sleep, args.agent_concurrency

    def median(rows, key, fmt="{:.3f}"):
        return fmt.format(statistics.median(row[key] for row in rows)) if rows else "n/a"

    def spread(rows, key, fmt="{:.3f}"):
        """median (lowest–highest)"""
        if not rows:
            return "n/a"
        values = [row[key] for row in rows]
        return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}–{fmt.format(max(values))})"

    def most(rows, key):
        return str(max(row[key] for row in rows)) if rows else "n/a"

    rate, rate_c, slots, slots_c = live["rate"], live["rate celery"], live["slots"], live["slots celery"]
    ratio = [{"ratio": row["rate"] / RATE_COUNT} for row in rate]
    ratio_c = [{"ratio": row["rate"] / RATE_COUNT} for row in rate_c]
    ideal_rate = (n - RATE_COUNT) / RATE_COUNT
    ideal = c * s / CONCURRENCY
    worst_window = max(row["most in 1 s"] for row in rate)
    worst_ratio = min(row["ratio"] for row in ratio)
    worst_at_once = max(row["most at once"] for row in slots)
    lines = [
        f"| operation limits (median of {args.rounds}; the most: of any round) | Switchyard | plain Celery | target | met |",
        "|---|---|---|---|---|",
        f"| rate `{RATE}`, {n:,} no-op steps: most sends in any 1 s window (stored `sending_at`; Celery: when each ran) "
        f"| {most(rate, 'most in 1 s')} | {most(rate_c, 'most in 1 s')} | ≤ {RATE_COUNT} "
        f"| {'yes' if worst_window <= RATE_COUNT else '**no**'} |",
        f"| rate: achieved rate / {RATE_COUNT}/s (Switchyard: ({n:,} − {RATE_COUNT}) / (last − first `sending_at`); "
        f"Celery: ({n:,} − 1) / (last − first run)) | {spread(ratio, 'ratio', '{:.2f}')} "
        f"| {spread(ratio_c, 'ratio', '{:.2f}')} | ≥ 0.95 | {'yes' if worst_ratio >= 0.95 else '**no**'} |",
        f"| rate: first to last send, s | {median(rate, 'span', '{:.2f}')} | {median(rate_c, 'span', '{:.2f}')} "
        f"| {ideal_rate:.2f} (Celery: {(n - 1) / RATE_COUNT:.2f}) | |",
        f"| rate: mean time between two drains that sent (distinct `sending_at`), s | {median(rate, 'gap', '{:.3f}')} "
        f"| | 1.000 | |",
        f"| rate: wall time, start → every step done, s | {median(rate, 'wall', '{:.2f}')} "
        f"| {median(rate_c, 'wall', '{:.2f}')} | | |",
        f"| concurrency {CONCURRENCY}, {c} steps of {s * 1000:.0f} ms: most at once ([`sending_at`, `succeeded_at`]; "
        f"Celery: its pool, no limit) | {most(slots, 'most at once')} | {most(slots_c, 'most at once')} "
        f"| ≤ {CONCURRENCY} | {'yes' if worst_at_once <= CONCURRENCY else '**no**'} |",
        f"| concurrency: most running at once ([`started_at`, `succeeded_at`]) | {most(slots, 'most running')} | | | |",
        f"| concurrency: a step's hold of its slot, `sending_at` → `succeeded_at`, median, s "
        f"| {median(slots, 'hold', '{:.3f}')} | | {s:.3f} | |",
        f"| concurrency: a slot freed (`succeeded_at`) → the next step's `sending_at`, median, s "
        f"| {median(slots, 'refill', '{:.3f}')} | | | |",
        f"| concurrency: first send → last success, s (ideal {c} × {s:g} / {CONCURRENCY}) "
        f"| {spread(slots, 'span', '{:.2f}')} | {median(slots_c, 'span', '{:.2f}')} "
        f"| {ideal:.2f} (Celery, {a} processes: {c * s / a:.2f}) | |",
        f"| concurrency: wall time, start → every step done, s | {median(slots, 'wall', '{:.2f}')} "
        f"| {median(slots_c, 'wall', '{:.2f}')} | | |",
    ]
    notes = [
        f"Plain Celery's `rate_limit` is a token bucket kept by each worker instance on its own (here one worker, "
        f"{a} pool processes): with W workers on the queue the task runs up to W × {RATE}; Switchyard's is kept "
        f"across every manager and agent. Celery has no limit of a task's concurrency: its column is the pool's own.",
        f"Agent: one, {a} pool processes (above the limit of {CONCURRENCY}).",
    ]
    return "\n".join(lines + [""] + notes)


# --- 3: the cost of a send under a limit -------------------------------------------------------

def _costs(sizes, rounds):
    """{case: (median ms, slowest ms, queries, steps sent)} for the gate's drain and the sends without a limit."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from bench.limit_workflows import CONCURRENCY, RATE_COUNT
    from workflows_app import clock
    from workflows_app.engine import progress
    from workflows_app.flow import gate
    from workflows_app.models import Execution, Operation, RateSend
    from workflows_app.registry import get_operation
    from workflows_app.states import OPERATION_HOLDING_SLOT, ExecutionStatus, FlowWait, OperationState

    slots, rated = get_operation("bench_lim_slots"), get_operation("bench_lim_rated")
    counter = iter(range(10**9))
    agent = "bench-limits-cost-agent"

    def step(execution_id, definition, at, *, state=OperationState.PENDING, flow_wait=""):
        i = next(counter)
        row = Operation(execution_id=execution_id, name=f"w{i:08d}", operation=definition.name, args=[i], kwargs={},
                        agent=agent, state=state, flow_wait=flow_wait, pending_at=at, max_retries=0)
        if definition.limits:
            gate.stamp(row, definition)
        return row

    def store(rows):
        for start in range(0, len(rows), 5_000):
            Operation.objects.bulk_create(rows[start:start + 5_000])

    def analyze():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE workflows_app_operation, workflows_app_ratesend, workflows_app_concurrencykey")

    def measure(one, before, after):
        """Median and slowest ms of ``one()`` over the rounds (after one warm-up) and the queries of
        one more (counted apart); ``before()`` and ``after()`` untimed around each."""
        def timed():
            before()
            began = time.perf_counter()
            one()
            spent = time.perf_counter() - began
            after()
            return spent

        timed()
        times = [timed() for _ in range(rounds)]
        before()
        with CaptureQueriesContext(connection) as queries:
            one()
        after()
        return statistics.median(times) * 1000, max(times) * 1000, len(queries)

    def execution():
        row = Execution(workflow_id="bench_lim_cost", parameters={}, status=ExecutionStatus.STARTED,
                        started_at=clock.now())
        Execution.objects.bulk_create([row])
        return row.pk

    def drained(definition, sent):
        """``gate.drain`` of ``definition``; ``sent`` steps must have gone (``sending``)."""
        def one():
            gate.drain(definition.name)

        def after():
            moved = Operation.objects.filter(operation=definition.name, state=OperationState.SENDING).count()
            assert moved == sent, f"{definition.name}: {moved} sent by one drain, not {sent}"
        return one, after

    def slot_case(waiting):
        """Concurrency: CONCURRENCY attempts hold the slots; each round one ends (its slot frees)
        and one more step joins the back of the queue; the drain sends the oldest."""
        execution_id = execution()
        base = clock.now() - timedelta(hours=1)
        store([step(execution_id, slots, base, state=OperationState.SENT) for _ in range(CONCURRENCY)]
              + [step(execution_id, slots, base + timedelta(microseconds=i + 1), flow_wait=FlowWait.CONCURRENCY)
                 for i in range(waiting)])
        analyze()
        one, check = drained(slots, 1)

        def before():
            holder = (Operation.objects.filter(operation=slots.name, state__in=OPERATION_HOLDING_SLOT)
                      .order_by("state", "pending_at").values_list("pk", flat=True)[:1])
            Operation.objects.filter(pk__in=list(holder)).update(state=OperationState.SUCCEEDED)
            store([step(execution_id, slots, clock.now(), flow_wait=FlowWait.CONCURRENCY)])

        def after():
            check()
            Operation.objects.filter(operation=slots.name, state=OperationState.SENDING).update(state=OperationState.SENT)
        return measure(one, before, after)

    def rate_case(waiting):
        """Rate: each round the last window's sends are a period old (it moved on) and as many
        steps as the rate join the back of the queue; the drain sends the oldest RATE_COUNT."""
        execution_id = execution()
        base = clock.now() - timedelta(hours=1)
        store([step(execution_id, rated, base + timedelta(microseconds=i), flow_wait=FlowWait.RATE_LIMIT)
               for i in range(waiting)])
        analyze()
        one, check = drained(rated, RATE_COUNT)

        def before():
            now = clock.now()
            RateSend.objects.filter(key__startswith=f"rate:{rated.name}").update(sent_at=now - timedelta(seconds=2))
            store([step(execution_id, rated, now + timedelta(microseconds=i), flow_wait=FlowWait.RATE_LIMIT)
                   for i in range(RATE_COUNT)])

        def after():
            check()
            Operation.objects.filter(operation=rated.name, state=OperationState.SENDING).update(
                state=OperationState.SUCCEEDED)
        return measure(one, before, after)

    def free_case(count):
        """No limit: ``count`` pending steps sent as the engine sends them when no gate holds them."""
        execution_id = execution()
        held = []

        def before():
            rows = [step(execution_id, free, clock.now()) for _ in range(count)]
            store(rows)
            held[:] = rows

        def one():
            locked = progress.lock_execution(execution_id)
            for op in held:
                op.execution = locked
            moved = progress.send_admitted(held)
            assert len(moved) == count, moved

        def after():
            Operation.objects.filter(execution_id=execution_id, state=OperationState.SENDING).update(
                state=OperationState.SUCCEEDED)
        return measure(one, before, after)

    class _Free:  # an operation without a limit (send_admitted never looks it up)
        name = "bench_lim_free"
        limits = None
    free = _Free()

    cases = [(("free", 1), lambda: free_case(1), 1)]
    cases += [(("slot", waiting), lambda waiting=waiting: slot_case(waiting), 1) for waiting in (0, *sizes)]
    cases += [(("free", RATE_COUNT), lambda: free_case(RATE_COUNT), RATE_COUNT)]
    cases += [(("rate", waiting), lambda waiting=waiting: rate_case(waiting), RATE_COUNT) for waiting in (0, *sizes)]
    results = {}
    with transaction.atomic():
        for key, case, sent in cases:
            with transaction.atomic():  # each case on its own: its rows go with its savepoint
                results[key] = (*case(), sent)
                transaction.set_rollback(True)
            print(f"cost: {key[0]}, {key[1]}: {results[key][0]:.2f} ms a drain, {results[key][2]} queries",
                  file=sys.stderr, flush=True)
        transaction.set_rollback(True)
    return results


def _cost_report(results, rounds, vendor):
    from bench.limit_workflows import CONCURRENCY, RATE

    lines = [f"| cost of a send under a limit ({vendor}, in-process, median of {rounds}) | per drain | slowest "
             "| per step sent | queries per drain | × none waiting |", "|---|---|---|---|---|---|"]
    names = {"free": "no limit: {sent} sent (`send_admitted` under the execution's lock)",
             "slot": f"concurrency {CONCURRENCY}: a slot freed, `drain` sends 1, {{what}}",
             "rate": f"rate {RATE}: the window moved on, `drain` sends {{sent}}, {{what}}"}
    for (kind, size), (median, slowest, queries, sent) in results.items():
        what = "none waiting behind" if size == 0 else f"{size:,} waiting behind"
        against = results.get((kind, 0)) if kind != "free" else None
        ratio = f"{median / against[0]:.2f}" if against else "—"
        steps = f"{size} step{'s' if size != 1 else ''}"
        case = names[kind].format(sent=steps if kind == "free" else sent, what=what)
        lines.append(f"| {case} | {median:.2f} ms | {slowest:.2f} ms | {median / sent:.3f} ms | {queries} | {ratio} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
