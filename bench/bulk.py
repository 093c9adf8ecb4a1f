"""``python -m bench.bulk [--executions N] [--one-at-a-time M]``: a bulk cancel of N (default
10,000) started executions in one ``POST /api/v1/executions/bulk`` request — its time, queries,
broker messages and memory — beside the same cancel asked one request per execution
(``POST /api/v1/executions/{id}``, M of them, default 1,000), and against the web process'
timeout: gunicorn's default ``--timeout`` of 30 s (the repository's Docker image runs gunicorn
with it), past which gunicorn kills a worker that is still answering a request.

Each execution is a row made directly (``bulk_create``: started, with one step started on an
agent that does not run), so each cancel does what a cancel of a running execution does: the
cancel service, with its permission check, moves it to ``cancelling`` in a transaction of its
own and asks, once committed, the agents to tell the running step it is cancelled — a broadcast
through the broker (counted as Redis ``PUBLISH`` commands when the broker is Redis). The
requests go through Django's test client in this process (no web server, no network: the
request's own cost), as an operator who is not a superuser, with Django's ``DEBUG`` off. A dry
run of the same N comes first: what reading and deciding cost without acting.

Runs against whatever ``DATABASE_URL`` and ``CELERY_BROKER_URL`` say (PostgreSQL and Redis are
the set-up this is about); the executions, their steps and events and the user it makes are
deleted at the end.
"""

import argparse
import json
import os
import platform
import threading
import time
import uuid
from datetime import datetime, timezone

#: gunicorn's default ``--timeout`` (seconds): a sync worker answering one request longer is killed.
WEB_TIMEOUT = 30


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench.bulk", description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=10_000, help="N: executions cancelled in one request")
    parser.add_argument("--one-at-a-time", type=int, default=1_000,
                        help="M: executions cancelled one request each, beside it")
    args = parser.parse_args(argv)
    if args.executions < 1 or args.one_at_a_time < 1:
        parser.error("--executions and --one-at-a-time must be at least 1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchyard.settings")
    os.environ.setdefault("DJANGO_DEBUG", "false")
    # M requests in a row would meet the API's write throttle (240 a minute) and measure it.
    os.environ["SWITCHYARD_WORKFLOWS"] = json.dumps({
        **json.loads(os.environ.get("SWITCHYARD_WORKFLOWS") or "{}"), "API_THROTTLE_RATES": {"read": None, "write": None}})
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import setup_test_environment

    from tests.integration.harness import ensure_broker

    setup_test_environment()  # the test client's host (testserver) allowed
    call_command("migrate", verbosity=0)
    ensure_broker()
    load_before = os.getloadavg()[0]
    suffix = uuid.uuid4().hex[:8]
    workflow, agent = f"bench_bulk_{suffix}", f"bench-bulk-{suffix}"
    user = _operator(f"bench-bulk-{suffix}")
    try:
        rows = _run(args, workflow, agent, user)
    finally:
        _clean(workflow, user)
    header = (f"{datetime.now(timezone.utc):%Y-%m-%d}, {platform.machine()} {os.cpu_count()} cores, "
              f"{connection.vendor}, broker {settings.CELERY_BROKER_URL.split(':')[0]}, "
              f"`python -m bench.bulk --executions {args.executions} --one-at-a-time {args.one_at_a_time}`, "
              f"Django DEBUG {'on' if settings.DEBUG else 'off'}, load average {load_before:.1f} at the start and "
              f"{os.getloadavg()[0]:.1f} at the end")
    print(header + "\n\n" + _report(rows, args))


def _run(args, workflow, agent, user):
    from django.urls import reverse
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(user)
    bulk_url = reverse("api:executions-bulk")
    body = {"action": "cancel", "filter": {"workflow_id": workflow}}
    many = _started(workflow, agent, args.executions)
    rows = {"dry": _measure(lambda: client.post(bulk_url, {**body, "dry_run": True}, format="json"), args.executions)}
    rows["bulk"] = _measure(lambda: client.post(bulk_url, body, format="json"), args.executions)
    assert rows["dry"]["answer"]["done"] == rows["bulk"]["answer"]["done"] == args.executions, rows["bulk"]["answer"]

    few = _started(workflow, agent, args.one_at_a_time)

    def one_at_a_time():
        for pk in few:
            response = client.post(reverse("api:execution", kwargs={"id": pk}), {"action": "cancel"}, format="json")
            assert response.status_code == 200, response.content
        return response

    rows["one"] = _measure(one_at_a_time, args.one_at_a_time, answer=False)
    _check_cancelling(many + few)
    return rows


def _measure(request, executions, answer=True) -> dict:
    """Time, queries (on every connection: the bulk action's threads have their own), broker
    messages and the peak growth of this process' memory of ``request()``."""
    from django.db import connection
    from django.db.backends.signals import connection_created

    queries, lock = [0], threading.Lock()

    def count(execute, sql, params, many, context):
        with lock:
            queries[0] += 1
        return execute(sql, params, many, context)

    def count_on(sender, connection, **kwargs):
        connection.execute_wrappers.append(count)

    sampler = _PeakMemory()
    published = _published()
    connection_created.connect(count_on)
    try:
        with sampler, connection.execute_wrapper(count):
            started, cpu = time.perf_counter(), time.process_time()
            response = request()
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        connection_created.disconnect(count_on)
    assert response.status_code == 200, response.content
    sent = None if published is None else _published() - published
    return {"executions": executions, "seconds": seconds, "cpu": cpu, "queries": queries[0], "messages": sent,
            "memory": sampler.peak_growth, "answer": response.json() if answer else None}


class _PeakMemory:
    """The peak growth of this process' resident memory while the block runs (sampled every 20 ms)."""

    def __enter__(self):
        import psutil

        self._process = psutil.Process()
        self._start = self._peak = self._process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.02):
            self._peak = max(self._peak, self._process.memory_info().rss)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._peak = max(self._peak, self._process.memory_info().rss)
        self.peak_growth = self._peak - self._start


def _published():
    """Redis' count of PUBLISH commands so far (a broadcast is one), or None on another broker."""
    from workflows_app import broker

    if not broker.broker_is_redis():
        return None
    from celery import current_app

    # Through kombu's own client: the embedded Redis' URL (redis+socket://) is none redis-py reads.
    with current_app.connection_for_read() as connection:
        stats = connection.default_channel.client.info("commandstats")
    return stats.get("cmdstat_publish", {}).get("calls", 0)


def _operator(username):
    """A user who may view and change executions (what cancel needs), not a superuser."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    user = get_user_model().objects.create_user(username)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="workflows_app",
                                                         codename__in=["view_execution", "change_execution"]))
    return get_user_model().objects.get(pk=user.pk)


def _started(workflow, agent, n) -> list:
    """``n`` started executions of ``workflow``, each with one step started on ``agent``; their ids."""
    from workflows_app.models import Execution, Operation
    from workflows_app.states import ExecutionStatus, OperationState

    executions = Execution.objects.bulk_create(
        (Execution(workflow_id=workflow, status=ExecutionStatus.STARTED) for _ in range(n)), batch_size=2000)
    Operation.objects.bulk_create(
        (Operation(execution=execution, name="busy", operation="noop", agent=agent, state=OperationState.STARTED,
                   attempt=1) for execution in executions), batch_size=2000)
    return [execution.pk for execution in executions]


def _check_cancelling(ids):
    from workflows_app.models import Execution

    left = Execution.objects.filter(pk__in=ids).exclude(status="cancelling").count()
    assert left == 0, f"{left} executions were not cancelled"


def _clean(workflow, user):
    from workflows_app import retention
    from workflows_app.models import Execution

    retention.discard(Execution.objects.filter(workflow_id=workflow))
    user.delete()


def _report(rows, args) -> str:
    lines = ["| case | executions | time s | per execution ms | CPU of this process per execution ms | queries | "
             "per execution | broker messages | peak memory growth MB |",
             "|---|---|---|---|---|---|---|---|---|"]
    names = {"dry": "bulk dry run, one request", "bulk": "bulk cancel, one request",
             "one": "cancel, one request per execution"}
    for key, name in names.items():
        row = rows[key]
        n = row["executions"]
        messages = "—" if row["messages"] is None else f"{row['messages']:,}"
        lines.append(f"| {name} | {n:,} | {row['seconds']:.2f} | {row['seconds'] / n * 1000:.2f} | "
                     f"{row['cpu'] / n * 1000:.2f} | {row['queries']:,} | "
                     f"{row['queries'] / n:.2f} | {messages} | {row['memory'] / 2**20:.1f} |")
    bulk, one = rows["bulk"], rows["one"]
    ratio = (bulk["seconds"] / bulk["executions"]) / (one["seconds"] / one["executions"])
    lines.append(f"| bulk / one request per execution, per execution | | | {ratio:.2f} | | | | | |")
    within = "within" if bulk["seconds"] < WEB_TIMEOUT else "over"
    lines.append(f"\nThe bulk cancel of {args.executions:,} took {bulk['seconds']:.1f} s: {within} gunicorn's default "
                 f"--timeout of {WEB_TIMEOUT} s.")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
