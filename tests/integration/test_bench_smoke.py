"""A tiny run of ``python -m bench`` (README's command), so the benchmark cannot rot unnoticed.
It measures nothing here: timings are read from its table by people, never asserted."""

import subprocess
import sys

import pytest

from tests.integration.harness import ROOT

pytestmark = pytest.mark.integration


def test_the_benchmark_runs_one_round_and_prints_its_table(tmp_path):
    output = tmp_path / "bench.md"
    done = subprocess.run([sys.executable, "-m", "bench", "--rounds", "1", "--output", str(output),
                           "--fanout", "20", "--chain", "5", "--starts", "10", "--suspended", "5"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    table = output.read_text()
    for case in ("kill, operation ignores SIGTERM: process tree gone", "cancel, cooperative operation: execution cancelled",
                 "force-cancel: execution cancelled", "celery revoke(terminate=True, signal=SIGKILL)",
                 "fan-out: 20 no-ops", "fan-in: 20 no-ops then a join", "chain: 5 sequential no-ops",
                 "chain: per step", "start throughput: 10 starts",
                 "suspended: RSS with 5 executions waiting", "wake: 5 events delivered until all completed"):
        assert case in table


def test_the_admin_page_timing_runs_and_reports_its_queries():
    done = subprocess.run([sys.executable, "-m", "bench.admin_page", "--operations", "400", "--rounds", "1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "median of 1)" in done.stdout
    for case in ("admin page, 10 operations", "admin page, 400 operations", "admin graph JSON, 400 operations"):
        assert case in done.stdout
