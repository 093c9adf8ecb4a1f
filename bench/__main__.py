"""``python -m bench [--rounds N] [--output FILE]``: Switchyard's benchmarks, each side by side
with plain Celery on the same broker, database and worker processes, in one run.

Runs against whatever ``DATABASE_URL`` and ``CELERY_BROKER_URL`` say (default: the embedded
SQLite and Redis), migrating the database first. Today: stop latency (``bench/stop.py``).
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
    args = parser.parse_args(argv)

    suffix = uuid.uuid4().hex[:8]
    workflows = {"MANAGEMENT_QUEUE": f"bench-mgmt-{suffix}", "KILL_GRACE_SECONDS": GRACE,
                 "AGENT_HEARTBEAT_SECONDS": 1, "AGENT_OFFLINE_AFTER_SECONDS": 10}
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchyard.settings")
    os.environ["SWITCHYARD_WORKFLOW_MODULES"] = "bench.workflows"
    os.environ["SWITCHYARD_WORKFLOWS"] = json.dumps(workflows)
    import django

    django.setup()
    from django.core.management import call_command

    from bench import stop
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
            stack.start_manager(concurrency=2)
            stack.start_agent(agent, concurrency=2)
            stack.wait_for_agent(agent)
            samples, notes = stop.run(stack, agent, bench_dir, args.rounds)
            failed = False
        finally:
            stack.close(failed=failed, out=sys.stderr)

    from django.db import connection

    header = (f"{datetime.now(timezone.utc):%Y-%m-%d}, {platform.machine()} {os.cpu_count()} cores, "
              f"{connection.vendor}, broker {django.conf.settings.CELERY_BROKER_URL.split(':')[0]}, "
              f"`python -m bench --rounds {args.rounds}`")
    table = header + "\n\n" + stop.report(samples, notes, GRACE)
    print(table)
    if args.output:
        args.output.write_text(table + "\n")


if __name__ == "__main__":
    main()
