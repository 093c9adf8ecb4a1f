"""A tiny run of ``python -m bench`` (README's command), so the benchmark cannot rot unnoticed.
It measures nothing here: timings are read from its table by people, never asserted."""

import re
import subprocess
import sys

import pytest
from django.db import connection

from tests.integration.harness import ROOT

pytestmark = pytest.mark.integration

#: How long the tiny run of every case may take: about 150 s on an idle 2-core machine, the
#: rest for a machine that runs other tests beside it.
BENCH_SECONDS = 400


@pytest.mark.slow  # every case of the benchmark, each with processes of its own
@pytest.mark.timeout(BENCH_SECONDS + 60)  # the command's own time, and the check of what it left
def test_the_benchmark_runs_one_round_and_prints_its_table(tmp_path):
    output = tmp_path / "bench.md"
    done = subprocess.run([sys.executable, "-m", "bench", "--rounds", "1", "--output", str(output),
                           "--fanout", "20", "--chain", "5", "--starts", "10", "--suspended", "5,20", "--deliveries", "10", "--suspended-started", "5",
                           "--imperative", "12", "--history", "1000", "--children", "6", "--local", "12",
                           "--connection-agents", "1,2"], cwd=ROOT, capture_output=True, text=True, timeout=BENCH_SECONDS)
    assert done.returncode == 0, done.stdout + done.stderr
    table = output.read_text()
    for case in ("kill, operation ignores SIGTERM: process tree gone", "cancel, cooperative operation: execution cancelled",
                 "force-cancel: execution cancelled", "celery revoke(terminate=True, signal=SIGKILL)",
                 "fan-out: 20 no-ops", "fan-in: 20 no-ops then a join", "chain: 5 sequential no-ops",
                 "chain: per step", "start throughput: 10 starts", "start throughput, the request alone: 10 starts", "fan-out: CPU per operation, every process on the machine",
                 "start throughput: CPU per start until its execution completed",
                 "suspended: RSS once all 5 started wait", "suspended: memory per waiting execution", "wake: 5 events delivered until all completed, 5 waiting",
                 "wake: 10 events delivered until all completed, 20 waiting", "tick: one pass with 20 waiting",
                 "wake: rate with 20 waiting / rate with 5 waiting",
                 "imperative chain: 5 awaited no-ops, per step", "imperative chain: 12 awaited no-ops, per step",
                 "graph chain: 12 no-ops, per step", "imperative per step, long / short",
                 "children: 6 child executions of one no-op, per child", "fan-out: 6 no-op steps, per step",
                 "more than a step of a fan-out",
                 "chain of 5 local no-op steps, per step / the same chain of agent steps",
                 "chain of 12 local no-op steps, per step / the chain of 5"):
        assert case in table
    # The messages through the broker per operation: Redis counts them (every set-up but RabbitMQ's,
    # where the benchmark does not run).
    assert re.search(r"fan-out: messages through the broker per operation \(20 no-ops; .*\| (\d+\.\d\d) \| "
                     r"(\d+\.\d\d) \|", table), table
    if connection.vendor == "postgresql":  # the cases that need it
        for case in ("| large history case |", "scale-out: fan-out of 20 no-ops as 2 executions of 10",
                     "| 2 managers, 2 agents |", "database cost per operation",
                     "| 1 agent |", "| 2 agents |",  # the connections case: one row per --connection-agents
                     "fan-out: 20 no-ops, durable floor (a group whose tasks make the two commits)",
                     "fan-out: CPU per operation, durable floor (20 no-ops)", "fan-out / floor",
                     "fan-out: 20 no-ops, durable floor with its history (each commit also stores its state event)",
                     "fan-out: CPU per operation, durable floor with its history (20 no-ops)",
                     "fan-out / floor with history",
                     "fan-out: 20 no-ops, broker floor (a group whose tasks claim and report through the broker as "
                     "agents do, stored in batches)", "fan-out: CPU per operation, broker floor (20 no-ops)",
                     "fan-out / broker floor", "chain: 5 sequential no-ops, broker floor", "chain / broker floor",
                     "fan-out: 20 no-ops, lean floor (a group whose tasks run unasked and report start and outcome in "
                     "one report through the broker, stored in batches)", "fan-out: CPU per operation, lean floor (20 no-ops)",
                     "fan-out / lean floor", "chain: 5 sequential no-ops, lean floor", "chain / lean floor",
                     "fan-out: 20 no-ops, batched floor (the lean floor's tasks reported by the agent's main process, "
                     "the reports of the tasks that ended together in one message)",
                     "fan-out: CPU per operation, batched floor (20 no-ops)", "fan-out / batched floor",
                     "chain: 5 sequential no-ops, batched floor", "chain / batched floor"):
            assert case in table
        # DBOS beside them (requirements/bench.txt, which the test tools include).
        for case in ("fan-out: 20 no-ops, DBOS queue", "chain: 5 sequential no-ops, per step, DBOS steps",
                     "chain of 5 local no-op steps, per step / DBOS's sequential steps"):
            assert case in table
    else:  # the floors' tables are PostgreSQL's, and DBOS runs on PostgreSQL only
        assert not [floor for floor in ("durable", "broker", "lean", "batched") if f"{floor} floor" in table]
        assert "DBOS" not in table
    # Every execution the benchmark ran is gone from its database (the environment's), the
    # suspended case's waiting ones included.
    assert "executions the benchmark ran" in done.stderr
    left = subprocess.run([sys.executable, "manage.py", "shell", "-v", "0", "-c",
                           "from workflows_app.models import Execution; "
                           "print(Execution.objects.filter(workflow_id__startswith='bench_').count())"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert left.stdout.strip() == "0", left.stdout + left.stderr


def test_the_admin_page_timing_runs_and_reports_its_queries():
    done = subprocess.run([sys.executable, "-m", "bench.admin_page", "--operations", "400", "--rounds", "1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "median of 1)" in done.stdout
    for case in ("admin page, 10 operations", "admin page, 400 operations", "admin graph JSON, 400 operations"):
        assert case in done.stdout


def test_the_harness_timing_runs_a_round_and_reports_it():
    done = subprocess.run([sys.executable, "-m", "bench.harness", "--rounds", "1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "a ten-step workflow with a retry and an hour's sleep, 1 rounds: median" in done.stdout


def test_the_concurrency_limits_timing_runs_and_reports_its_cases():
    done = subprocess.run([sys.executable, "-m", "bench.concurrency", "--queued", "50", "--keys", "20", "--history", "100",
                           "--rounds", "1"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for case in ("admission, key full, 50 queued on the key", "promotion, 50 queued on the key",
                 "deployment lock: promotion, 50 queued", "plain Celery `send_task`"):
        assert case in done.stdout


def test_the_operation_limits_timing_runs_and_reports_what_a_drain_costs():
    """The in-process part of ``python -m bench.limits`` (the live part starts its own manager and
    agent for minutes: run by hand, docs/benchmarks.md)."""
    done = subprocess.run([sys.executable, "-m", "bench.limits", "--skip-live", "--waiting", "20", "--cost-rounds", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for case in ("a slot freed, `drain` sends 1, 20 waiting behind", "the window moved on, `drain` sends 200, 20 waiting",
                 "no limit: 1 step sent"):
        assert case in done.stdout


def test_the_bulk_timing_runs_reports_its_cases_and_leaves_nothing_behind():
    done = subprocess.run([sys.executable, "-m", "bench.bulk", "--executions", "40", "--one-at-a-time", "10"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for case in ("| bulk dry run, one request | 40 |", "| bulk cancel, one request | 40 |",
                 "| cancel, one request per execution | 10 |", "| bulk / one request per execution, per execution |",
                 "gunicorn's default --timeout of 30 s"):
        assert case in done.stdout
    left = subprocess.run([sys.executable, "manage.py", "shell", "-v", "0", "-c",
                           "from workflows_app.models import Execution; "
                           "print(Execution.objects.filter(workflow_id__startswith='bench_bulk_').count())"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert left.stdout.strip() == "0", left.stdout + left.stderr
