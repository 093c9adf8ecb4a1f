"""``python -m bench.admin_page [--operations N] [--rounds R]``: how long the admin's page of an
execution takes to render, and how many queries it runs, for an execution of 10 operations and
one of N (default 10,000), in this process through Django's test client (no web server, no
network: the page's own cost). Its graph comes by JSON afterwards, so that is timed too.

Runs against whatever ``DATABASE_URL`` says (default: the embedded SQLite), in a transaction
rolled back at the end: it leaves nothing behind. Nothing here compares with Celery, which has
no such page; README keeps the numbers beside the benchmark table.
"""

import argparse
import os
import statistics
import time


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.admin_page", description=__doc__.splitlines()[0])
    parser.add_argument("--operations", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchyard.settings")
    os.environ.setdefault("DJANGO_DEBUG", "false")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection, transaction
    from django.test import Client
    from django.test.utils import CaptureQueriesContext, setup_test_environment
    from django.urls import reverse

    from workflows_app.models import Execution, Operation, OperationDependency
    from workflows_app.states import ExecutionStatus, OperationState

    setup_test_environment()  # the test client's template rendering hooks
    call_command("migrate", verbosity=0)

    def chain(n):
        execution = Execution.objects.create(workflow_id="bench", status=ExecutionStatus.STARTED)
        operations = Operation.objects.bulk_create(
            Operation(execution=execution, name=f"step-{i}", operation="noop", agent="bench",
                      state=OperationState.SUCCEEDED if i < n // 2 else OperationState.PENDING)
            for i in range(n))
        OperationDependency.objects.bulk_create(
            OperationDependency(operation=operations[i], depends_on=operations[i - 1]) for i in range(1, n))
        return execution

    def measure(client, url):
        times = []
        for _ in range(args.rounds):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                response = client.get(url)
                times.append(time.perf_counter() - started)
            assert response.status_code == 200, response.status_code
        return statistics.median(times) * 1000, len(queries)

    rows = []
    with transaction.atomic():
        user = get_user_model().objects.create_superuser(f"bench-{time.time_ns()}", "bench@localhost", "x")
        client = Client()
        client.force_login(user)
        for n in (10, args.operations):
            execution = chain(n)
            for what, url in [("page", reverse("admin:workflows_app_execution_change", args=[execution.pk])),
                              ("graph JSON", reverse("admin:workflows_app_execution_graph", args=[execution.pk]))]:
                ms, queries = measure(client, url)
                rows.append(f"| admin {what}, {n:,} operations | {ms:.1f} ms | {queries} |")
        transaction.set_rollback(True)
    print(f"| case ({connection.vendor}, median of {args.rounds}) | time | queries |\n|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
