"""``python -m bench.metrics [--sizes N,N…] [--operations K] [--rounds R]``: how long a scrape of
``GET /api/v1/metrics`` takes, and how many queries it runs, with 1,000, 10,000 and 100,000
executions stored (K operations each, default 3), nine in ten of them ended.

Each scrape is a request through Django's test client with the scrape token (no web server, no
network: the endpoint's own cost), the broker's count of the reports waiting included. Runs
against whatever ``DATABASE_URL`` and ``CELERY_BROKER_URL`` say (default: the embedded SQLite and
Redis), in a transaction rolled back at the end: it leaves nothing behind. Nothing here compares
with Celery, which has no such endpoint.
"""

import argparse
import os
import random
import statistics
import time
from datetime import timedelta

from bench import increasing_sizes

#: Kinds of rows, so that every series has many label values, as in a real deployment.
WORKFLOWS = 20
OPERATIONS = 30
AGENTS = 5
TOKEN = "bench-metrics-scrape-token-0123456789"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.metrics", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=increasing_sizes, default=(1_000, 10_000, 100_000),
                        help="N,N…: executions stored at each measurement, in increasing order")
    parser.add_argument("--operations", type=int, default=3, help="K: operations of each execution")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.operations < 0:
        parser.error("--rounds must be at least 1 and --operations at least 0")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchyard.settings")
    os.environ.setdefault("DJANGO_DEBUG", "false")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.test import Client, override_settings
    from django.test.utils import CaptureQueriesContext, setup_test_environment
    from django.utils import timezone

    from workflows_app.models import Execution, Operation
    from workflows_app.states import EXECUTION_TERMINAL, ExecutionStatus, OperationState

    setup_test_environment()  # the test client's hooks, and ALLOWED_HOSTS for its "testserver"
    call_command("migrate", verbosity=0)
    if connection.vendor == "postgresql":
        # The rows an earlier run rolled back stay in the tables, dead, until a vacuum: a scan
        # would read them too, and the smallest sizes would measure the last run's leftovers.
        with connection.cursor() as cursor:
            cursor.execute("VACUUM workflows_app_execution, workflows_app_operation")
    rng = random.Random(37)
    now = timezone.now()
    ended = sorted(EXECUTION_TERMINAL)
    active = [ExecutionStatus.PENDING, ExecutionStatus.STARTED, ExecutionStatus.QUEUED]

    def add(count):
        """``count`` more executions, nine in ten ended, with their operations (one statement per 5,000)."""
        for start in range(0, count, 5_000):
            executions = []
            for _ in range(min(5_000, count - start)):
                began = now - timedelta(seconds=rng.uniform(60, 30 * 86400))
                over = rng.random() < 0.9
                executions.append(Execution(
                    workflow_id=f"wf-{rng.randrange(WORKFLOWS)}", status=rng.choice(ended if over else active),
                    created_at=began, started_at=began, ended_at=began + timedelta(seconds=rng.expovariate(1 / 300))
                    if over else None))
            Execution.objects.bulk_create(executions)
            operations = []
            for execution in executions:
                for i in range(args.operations):
                    sent = execution.started_at + timedelta(seconds=i)
                    started = sent + timedelta(seconds=rng.expovariate(2))
                    state = OperationState.SUCCEEDED if execution.ended_at else rng.choice(list(OperationState))
                    operations.append(Operation(
                        execution=execution, name=f"step-{i}", operation=f"op-{rng.randrange(OPERATIONS)}",
                        agent=f"agent-{rng.randrange(AGENTS)}", state=state, pending_at=sent, sent_at=sent,
                        started_at=started, succeeded_at=started + timedelta(seconds=rng.expovariate(1 / 5))))
            Operation.objects.bulk_create(operations)

    rows = []
    with transaction.atomic(), override_settings(WORKFLOWS={"METRICS_TOKEN": TOKEN}):
        client = Client(HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        stored = 0
        for size in args.sizes:
            began = time.perf_counter()
            add(size - stored)
            stored = size
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:  # the planner's statistics of what was just added
                    cursor.execute("ANALYZE workflows_app_execution, workflows_app_operation")
            filled = time.perf_counter() - began
            client.get("/api/v1/metrics")  # warm-up, not counted
            times = []
            for _ in range(args.rounds):
                with CaptureQueriesContext(connection) as queries:
                    started = time.perf_counter()
                    response = client.get("/api/v1/metrics")
                    times.append(time.perf_counter() - started)
                assert response.status_code == 200, (response.status_code, response.content[:300])
            rows.append(f"| {size:,} executions, {size * args.operations:,} operations | "
                        f"{statistics.median(times) * 1000:.0f} ms | {max(times) * 1000:.0f} ms | {len(queries)} | "
                        f"{len(response.content) / 1024:.0f} KiB | {filled:.0f} s |")
            print(rows[-1], flush=True)
        transaction.set_rollback(True)
    print(f"\n| stored ({connection.vendor}, {args.rounds} scrapes each) | median | slowest | queries | size | "
          f"filled in |\n|---|---|---|---|---|---|")
    print("\n".join(rows))



if __name__ == "__main__":
    main()
