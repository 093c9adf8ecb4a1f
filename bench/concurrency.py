"""``python -m bench.concurrency [--queued N,N…] [--keys K] [--rounds R] [--explain]``: what a
concurrency limit's queue costs: the time and the queries of one admission (a start counted
against its key) and of one promotion (an execution of the key ends, the first queued one
starts), with 0, 1,000 and 10,000 executions queued on the key, with K (default 10,000) other keys
each with its own queue, and for a deployment's lock with 10,000 queued on it; H (default 100,000) ended executions of
those keys and that deployment are stored too, older than their queues.

Each case is measured against the same start or promotion on an empty queue (the ratio column),
and a start of a workflow without a limit is given beside it, as is a plain Celery ``send_task``
to the broker when one answers. Every start goes through ``services.start``, every promotion
through ``engine.concurrency`` as the reaction to an execution's end calls it; the messages they
would send once committed are not sent (the transaction is never committed).

Runs against whatever ``DATABASE_URL`` says (PostgreSQL is the case that matters: the row locks
and the plans of its indexes), in one transaction rolled back at the end: it leaves nothing
behind. The executions queued are made in bulk (``bulk_create``) and the planner's statistics
taken (``ANALYZE``) before each case. ``--explain`` prints the plan of each of the queue's
queries at the largest number queued.
"""

import argparse
import os
import statistics
import time
from datetime import timedelta

from bench import increasing_sizes

#: The limit of the benchmark's keyed workflow (per customer).
LIMIT = 2


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.concurrency", description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=increasing_sizes, default=(1_000, 10_000),
                        help="N,N…: executions queued on one key at each measurement, in increasing order "
                             "(the empty queue is always measured first)")
    parser.add_argument("--keys", type=int, default=10_000,
                        help="K: other keys, each with its own queue (0: leave out)")
    parser.add_argument("--history", type=int, default=100_000,
                        help="H: ended executions of the measured keys and deployment, older than their queues "
                             "(0: none)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--explain", action="store_true", help="print the plans of the queue's queries")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.keys < 0 or args.history < 0:
        parser.error("--rounds must be at least 1, --keys and --history at least 0")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchyard.settings")
    os.environ.setdefault("DJANGO_DEBUG", "false")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from workflows_app import clock, registry, services
    from workflows_app.engine import concurrency
    from workflows_app.models import ConcurrencyKey, Execution
    from workflows_app.states import ExecutionStatus
    from workflows_app.transitions import execution_transition

    call_command("migrate", verbosity=0)

    def limited(ctx, customer):
        pass

    def free(ctx, n=0):
        pass

    registry.workflow(name="bench_cc_limited", concurrency=LIMIT, concurrency_key="customer")(limited)
    registry.workflow(name="bench_cc_roomy", concurrency=10**9, concurrency_key="customer")(limited)
    registry.workflow(name="bench_cc_free")(free)
    key_of = {}

    def key(customer):
        return key_of.setdefault(customer, concurrency.Key.of_workflow(
            f'bench_cc_limited:customer="{customer}"', "bench_cc_limited"))

    def queued_row(customer, created_at, deployment_id=None, status=ExecutionStatus.QUEUED):
        return Execution(workflow_id="bench_cc_free" if deployment_id else "bench_cc_limited",
                         parameters={"customer": customer}, deployment_id=deployment_id,
                         concurrency_key="" if deployment_id else key(customer).row, created_at=created_at,
                         status=status)

    def fill(customer, queued, *, deployment_id=None, admitted=LIMIT):
        """The key of ``customer`` (or the deployment) at its limit, ``queued`` executions waiting."""
        base = clock.now() - timedelta(hours=1)
        rows = [queued_row(customer, base + timedelta(microseconds=i), deployment_id,
                           ExecutionStatus.STARTED if i < admitted else ExecutionStatus.QUEUED)
                for i in range(admitted + queued)]
        for start in range(0, len(rows), 5_000):
            Execution.objects.bulk_create(rows[start:start + 5_000])
        row = f"{concurrency.DEPLOYMENT_ROW}{deployment_id}" if deployment_id else key(customer).row
        ConcurrencyKey.objects.bulk_create([ConcurrencyKey(key=row)], ignore_conflicts=True)

    def analyze():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE workflows_app_execution, workflows_app_concurrencykey")

    def measure(one, before=None, after=None):
        """The median and the slowest time of ``one()`` in ms over the rounds (after one warm-up),
        and the queries of one more (counted apart: counting costs time). ``before()`` and
        ``after(result)``, untimed, around each."""
        def timed():
            if before:
                before()
            began = time.perf_counter()
            result = one()
            spent = time.perf_counter() - began
            if after:
                after(result)
            return spent

        timed()
        times = [timed() for _ in range(args.rounds)]
        if before:
            before()
        with CaptureQueriesContext(connection) as queries:
            result = one()
        if after:
            after(result)
        return statistics.median(times) * 1000, max(times) * 1000, len(queries)

    def cancel_queued(execution):
        """Take a start that went queued off the queue again: each round finds the same queue."""
        assert execution.status == ExecutionStatus.QUEUED, execution.status
        execution_transition(execution, ExecutionStatus.CANCELLED)

    def admission(customer):
        return measure(lambda: services.start("bench_cc_limited", {"customer": customer}), after=cancel_queued)

    def promotion(the_key, customer, deployment_id=None):
        """An admitted execution of the key ends and one joins the back of its queue (untimed): the
        first queued one is promoted (timed); the queue keeps its length."""
        def before():
            ended = the_key.admitted().order_by("created_at").first()
            execution_transition(ended, ExecutionStatus.CANCELLED if ended.status == ExecutionStatus.PENDING
                                 else ExecutionStatus.COMPLETED)
            queued_row(customer, clock.now(), deployment_id).save()

        def one():
            started = concurrency.start_next(the_key)
            assert len(started) == 1, started
        return measure(one, before=before)

    rows, plans = [], []
    with transaction.atomic():
        # The baselines: a start without a limit, a start of a key with room, the first of a key.
        new_keys = iter(range(10**9))
        rows.append(("start, no limit", measure(lambda: services.start("bench_cc_free")), None))
        rows.append(("start, a key with room (pending)",
                     measure(lambda: services.start("bench_cc_roomy", {"customer": "roomy"})), None))
        rows.append(("start, the first of a new key (its row created)",
                     measure(lambda: services.start("bench_cc_limited", {"customer": f"new-{next(new_keys)}"})), None))

        sizes = (0, *args.queued)
        # The history: what makes a key frequent in the planner's statistics while few of its rows
        # are queued (the case where a plan that scans by time rather than by key would cost most).
        old = clock.now() - timedelta(days=30)
        measured = [f"queue-{size}" for size in sizes] + ["beside-others"]
        history = [Execution(workflow_id="bench_cc_limited", parameters={"customer": measured[i % len(measured)]},
                             concurrency_key=key(measured[i % len(measured)]).row, deployment_id="bench-site",
                             created_at=old + timedelta(seconds=i), status=ExecutionStatus.COMPLETED)
                   for i in range(args.history)]
        for start in range(0, len(history), 5_000):
            Execution.objects.bulk_create(history[start:start + 5_000])
        admissions, promotions = {}, {}
        for size in sizes:
            customer = f"queue-{size}"
            fill(customer, size)
            analyze()
            admissions[size] = admission(customer)
            promotions[size] = promotion(key(customer), customer)
            if args.explain and size == sizes[-1]:
                plans += _plans(key(customer), connection)
        for size in sizes:
            what = "empty queue" if size == 0 else f"{size:,} queued on the key"
            rows.append((f"admission, key full, {what} (goes queued)", admissions[size], admissions[0]))
        for size in sizes:
            what = "no other queued" if size == 0 else f"{size:,} queued on the key"
            rows.append((f"promotion, {what}", promotions[size], promotions[0]))

        if args.keys:
            base = clock.now() - timedelta(hours=2)
            others = [f"other-{i}" for i in range(args.keys)]
            bulk = [queued_row(customer, base + timedelta(microseconds=i),
                               status=ExecutionStatus.STARTED if j < LIMIT else ExecutionStatus.QUEUED)
                    for i, customer in enumerate(others) for j in range(LIMIT + 1)]
            for start in range(0, len(bulk), 5_000):
                Execution.objects.bulk_create(bulk[start:start + 5_000])
            ConcurrencyKey.objects.bulk_create([ConcurrencyKey(key=key(c).row) for c in others], ignore_conflicts=True)
            customer = "beside-others"
            fill(customer, 0)
            analyze()
            rows.append((f"admission, key full, {args.keys:,} other keys each with 1 queued",
                         admission(customer), admissions[0]))
            rows.append((f"promotion, {args.keys:,} other keys each with 1 queued",
                         promotion(key(customer), customer), promotions[0]))
            rows.append((f"the tick's look for keys to promote: {args.keys:,} keys waiting, none free",
                         measure(concurrency.start_every_free_key), None))

        deployment = "bench-site"
        fill(deployment, sizes[-1], deployment_id=deployment, admitted=1)
        analyze()
        lock = concurrency.Key.of_deployment(deployment)
        rows.append((f"deployment lock: start with queue, {sizes[-1]:,} queued",
                     measure(lambda: services.start("bench_cc_free", deployment_id=deployment, queue=True),
                             after=cancel_queued), None))
        rows.append((f"deployment lock: promotion, {sizes[-1]:,} queued", promotion(lock, deployment, deployment),
                     None))
        if args.explain:
            plans += _plans(lock, connection)
        transaction.set_rollback(True)

    celery = _send_task(args.rounds)
    print(f"\n| case ({connection.vendor}, median of {args.rounds}) | time | slowest | queries | × empty queue |"
          "\n|---|---|---|---|---|")
    for what, (median, slowest, queries), against in rows:
        ratio = f"{median / against[0]:.2f}" if against else "—"
        print(f"| {what} | {median:.2f} ms | {slowest:.2f} ms | {queries} | {ratio} |")
    if celery is not None:
        print(f"| plain Celery `send_task` (to the broker, no database) | {celery[0]:.2f} ms | {celery[1]:.2f} ms | 0 "
              "| — |")
    for title, plan in plans:
        print(f"\n{title}:\n{plan}")


def _plans(key, connection):
    """The plans of the queue's queries on ``key`` (PostgreSQL's EXPLAIN ANALYZE)."""
    if connection.vendor != "postgresql":
        return []
    head = key.queued().first()
    queries = {
        f"{key.row}: the first queued ones (candidates of a promotion)": key.queued()[:LIMIT],
        f"{key.row}: the admitted ones (counted)": key.admitted().order_by(),
        f"{key.row}: the queued ones ahead of one, the first few": key.queued(ahead_of=head).values("pk")[:key.limit],
    }
    return [(title, query.explain(analyze=True)) for title, query in queries.items()]


def _send_task(rounds):
    """The median and slowest ``send_task`` of a task no worker runs, in ms; None without a broker."""
    from kombu.exceptions import OperationalError

    from switchyard.celery import app
    from workflows_app import embedded_redis

    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1)
    except OperationalError:
        return None
    queue = f"bench-concurrency-{os.getpid()}"
    times = []
    with app.producer_or_acquire() as producer:
        for _ in range(rounds + 1):
            began = time.perf_counter()
            app.send_task("bench.concurrency.nothing", queue=queue, producer=producer)
            times.append(time.perf_counter() - began)
    with app.connection_for_write() as conn:
        conn.default_channel.queue_delete(queue)
    # An embedded Redis this run started goes with it, as the test suite's does.
    directory = embedded_redis.var_dir_of(app.conf.broker_url or "")
    if directory is not None and embedded_redis.started_here(directory):
        embedded_redis.stop(directory)
    return statistics.median(times[1:]) * 1000, max(times[1:]) * 1000



if __name__ == "__main__":
    main()
