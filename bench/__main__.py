"""``python -m bench``: Switchyard's benchmarks, each side by side with plain Celery on the same broker, database and worker processes, in one run.

``python -m bench [--rounds N] [--output FILE] [--fanout N] [--chain M] [--starts K] [--skip-stop] [--suspended K]``

Runs against whatever ``DATABASE_URL`` and ``CELERY_BROKER_URL`` say (default: the embedded
SQLite and Redis), migrating the database first. Cases: stop latency (``bench/stop.py``), and
fan-out, fan-in, chain and start throughput (``bench/throughput.py``), and K executions suspended
on an event at once, then woken (``bench/suspended.py``).
"""

import argparse
import json
import os
import platform
import sys
import tempfile
import uuid
from datetime import datetime, timezone
from pathlib import Path

GRACE = 1


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", type=Path, default=None, help="also write the table to this file")
    parser.add_argument("--fanout", type=int, default=1000, help="N: no-ops of the fan-out and fan-in cases")
    parser.add_argument("--chain", type=int, default=100, help="M: sequential no-ops of the chain case")
    parser.add_argument("--starts", type=int, default=200, help="K: starts of the start-throughput case")
    parser.add_argument("--skip-stop", action="store_true", help="leave out the stop-latency cases")
    parser.add_argument("--suspended", type=int, default=10000,
                        help="K: executions waiting for an event at once (0: leave the case out)")
    args = parser.parse_args(argv)
    if min(args.rounds, args.fanout, args.chain, args.starts) < 1:
        parser.error("--rounds, --fanout, --chain and --starts must be at least 1")
    if args.suspended < 0:
        parser.error("--suspended must be 0 (leave it out) or more")
    sizes = {"fanout": args.fanout, "chain": args.chain, "starts": args.starts}

    suffix = uuid.uuid4().hex[:8]
    workflows = {"MANAGEMENT_QUEUE": f"bench-mgmt-{suffix}", "KILL_GRACE_SECONDS": GRACE,
                 "AGENT_HEARTBEAT_SECONDS": 1, "AGENT_OFFLINE_AFTER_SECONDS": 10}
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchyard.settings")
    # Production's setting, in this process and the stack's (which inherit it): with DEBUG on,
    # Django also formats and keeps every query, which costs a third of a no-op operation.
    os.environ.setdefault("DJANGO_DEBUG", "false")
    os.environ["SWITCHYARD_WORKFLOW_MODULES"] = "bench.workflows"
    os.environ["SWITCHYARD_WORKFLOWS"] = json.dumps(workflows)
    import django

    django.setup()
    from django.core.management import call_command

    from bench import stop, suspended, throughput
    from tests.integration.harness import Stack, ensure_broker

    call_command("migrate", verbosity=0)
    ensure_broker()
    with tempfile.TemporaryDirectory(prefix="switchyard-bench-") as tmp:
        bench_dir = Path(tmp) / "pids"
        bench_dir.mkdir()
        stack = Stack(tmp, suffix=suffix, workflows=workflows, markers_dir=bench_dir,
                      extra_env={stop.BENCH_DIR_ENV: str(bench_dir), "SWITCHYARD_WORKFLOW_MODULES": "bench.workflows"})
        os.environ[stop.BENCH_DIR_ENV] = str(bench_dir)
        failed = True
        try:
            agent = f"bench-agent-{suffix}"
            manager = stack.start_manager(concurrency=2)
            agent_process = stack.start_agent(agent, concurrency=2)
            stack.wait_for_agent(agent)
            samples, notes = ({}, {}) if args.skip_stop else stop.run(stack, agent, bench_dir, args.rounds)
            rows = throughput.run(stack, agent, args.rounds, sizes)
            waiting = suspended.run(stack, [manager, agent_process], args.suspended) if args.suspended else []
            failed = False
        finally:
            stack.close(failed=failed, out=sys.stderr)

    from django.db import connection

    header = (f"{datetime.now(timezone.utc):%Y-%m-%d}, {platform.machine()} {os.cpu_count()} cores, "
              f"{connection.vendor}, broker {django.conf.settings.CELERY_BROKER_URL.split(':')[0]}, "
              f"`python -m bench --rounds {args.rounds} --fanout {args.fanout} --chain {args.chain} --starts {args.starts} "
              f"--suspended {args.suspended}`, "
              f"one agent of concurrency 2, manager concurrency 2, Django DEBUG {'on' if django.conf.settings.DEBUG else 'off'}")
    sections = [header]
    if samples:
        sections.append(stop.report(samples, notes, GRACE))
    sections.append(throughput.report(rows))
    if waiting:
        sections.append(suspended.report(waiting))
    table = "\n\n".join(sections)
    print(table)
    if args.output:
        args.output.write_text(table + "\n")


if __name__ == "__main__":
    main()
