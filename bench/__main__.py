"""``python -m bench``: Switchyard's benchmarks, each side by side with plain Celery on the same broker, database and worker processes, in one run.

``python -m bench [--rounds N] [--output FILE] [--fanout N] [--chain M] [--starts K] [--skip-stop]
[--suspended W,W…] [--deliveries D] [--suspended-started S] [--imperative L] [--history H] [--skip-scaleout]
[--children C] [--local J] [--connection-agents A,A…]``

Runs against whatever ``DATABASE_URL`` and ``CELERY_BROKER_URL`` say (default: the embedded
SQLite and Redis), migrating the database first. Cases: stop latency (``bench/stop.py``), and
fan-out, fan-in, chain and start throughput (``bench/throughput.py``), executions suspended on an
event and woken at two numbers waiting (``bench/suspended.py``), an imperative chain of M and of
L steps against a graph chain of L (``bench/imperative.py``), a parent of C child executions
(``bench/children.py``), a chain of M and of J local steps (run in the manager's pass, with
no message) against the same chain of agent steps, a Celery ``chain`` link and DBOS's steps
(``bench/local_steps.py``), and on PostgreSQL the throughput cases again with a large history in
the tables (``bench/history.py``) and with a second manager and agent, with the database's cost
per operation (``bench/scaleout.py``), and the database connections held with 1 agent and with
20 (``--connection-agents``; ``bench/connections.py``). The waiting executions come last: they are left waiting. Once the
benchmark's manager and agent are gone, every execution of its workflows is removed, waiting or
ended.
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
#: The connections case's numbers of agents: one, and as many as a deployment may well run.
CONNECTION_AGENTS = (1, 20)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--output", type=Path, default=None, help="also write the table to this file")
    parser.add_argument("--fanout", type=int, default=1000, help="N: no-ops of the fan-out and fan-in cases")
    parser.add_argument("--chain", type=int, default=100, help="M: sequential no-ops of the chain case")
    parser.add_argument("--starts", type=int, default=200, help="K: starts of the start-throughput case")
    parser.add_argument("--skip-stop", action="store_true", help="leave out the stop-latency cases")
    parser.add_argument("--suspended", type=_sizes, default=(1000, 100000),
                        help="W,W…: executions waiting for an event at once, one measurement per number (0: leave the case out)")
    parser.add_argument("--deliveries", type=int, default=10000, help="D: events delivered at each number waiting")
    parser.add_argument("--suspended-started", type=int, default=10000,
                        help="S: executions started through the engine and left waiting, last, for their memory")
    parser.add_argument("--imperative", type=int, default=10000,
                        help="L: steps of the long imperative and graph chains (the short one has M; 0: leave the case out)")
    parser.add_argument("--history", type=int, default=100000,
                        help="H: ended executions (10 events each) the throughput cases run again with (0: leave the case "
                             "out; PostgreSQL only)")
    parser.add_argument("--children", type=int, default=200,
                        help="C: child executions of one parent, against a group of as many (0: leave the case out)")
    parser.add_argument("--local", type=int, default=1000,
                        help="J: steps of the long chain of local steps (the short one has M; 0: leave the case out)")
    parser.add_argument("--skip-scaleout", action="store_true",
                        help="leave out the second manager and agent, the database cost per operation and the connections held "
                             "(PostgreSQL only)")
    parser.add_argument("--connection-agents", type=_sizes, default=CONNECTION_AGENTS,
                        help="A,A…: numbers of agents the connections case runs its fan-out with, one row each (0: leave "
                             "the case out; PostgreSQL only)")
    args = parser.parse_args(argv)
    if min(args.rounds, args.fanout, args.chain, args.starts) < 1:
        parser.error("--rounds, --fanout, --chain and --starts must be at least 1")
    if min(args.imperative, args.history, args.children, args.local) < 0 or args.deliveries < 1 or args.suspended_started < 2:
        parser.error("--imperative, --history, --children and --local must be 0 (leave it out) or more, --deliveries 1 or more and "
                     "--suspended-started 2 or more")
    sizes = {"fanout": args.fanout, "chain": args.chain, "starts": args.starts}

    suffix = uuid.uuid4().hex[:8]
    workflows = {"MANAGEMENT_QUEUE": f"bench-mgmt-{suffix}", "KILL_GRACE_SECONDS": GRACE,
                 "AGENT_HEARTBEAT_SECONDS": 1, "AGENT_OFFLINE_AFTER_SECONDS": 10,
                 # The start case makes hundreds of starts a round: the API's default write rate
                 # (240 a minute) would throttle it into measuring the throttle.
                 "API_THROTTLE_RATES": {"read": "100000/minute", "write": "100000/minute"}}
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchyard.settings")
    # Production's setting, in this process and the stack's (which inherit it): with DEBUG on,
    # Django also formats and keeps every query, which costs a third of a no-op operation.
    os.environ.setdefault("DJANGO_DEBUG", "false")
    os.environ["SWITCHYARD_WORKFLOW_MODULES"] = "bench.workflows"
    os.environ["SWITCHYARD_WORKFLOWS"] = json.dumps(workflows)
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from bench import (children, connections, dbos_peer, history, imperative, local_steps, scaleout, stop, suspended,
                       throughput)
    from bench import workflows as bench_workflows
    from tests.integration.harness import Stack, ensure_broker
    from workflows_app import retention
    from workflows_app.models import Execution

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
            # With the database's address, unlike an agent of the tests: the durable floors of the
            # throughput case are plain Celery tasks that write to the database from this worker.
            # Switchyard's own work on it uses none (bench/connections.py counts).
            agent_process = stack.manage(agent, "run_agent", agent, "--concurrency", "2", "--loglevel", "INFO")
            stack.wait_for_agent(agent)
            samples, notes = ({}, {}) if args.skip_stop else stop.run(stack, agent, bench_dir, args.rounds)
            postgres = connection.vendor == "postgresql"
            rows = throughput.run(stack, agent, args.rounds, sizes, processes=[manager, agent_process])
            dbos = None
            if dbos_peer.available():  # the durable peer, in the same run
                dbos = dbos_peer.run(args.rounds, sizes)
                rows += dbos_peer.rows(dbos, rows, sizes, throughput.Row)
            else:
                print("DBOS left out: it runs where dbos is installed (requirements/bench.txt) and the database is "
                      "PostgreSQL", file=sys.stderr)
            replay = imperative.run(stack, agent, {"short": args.chain, "long": args.imperative}) if args.imperative else []
            local_sizes = {"short": args.chain, "long": args.local}
            local = local_steps.run(agent, args.rounds, local_sizes) if args.local else None
            tree = children.run(stack, agent, args.rounds, args.children) if args.children else []
            large = history.run(stack, agent, args.rounds, sizes, executions=args.history) if args.history and postgres else None
            # It stops the benchmark's manager and agent and starts its own; they start again after it.
            scale = scaleout.run(stack, [manager, agent_process], args.rounds, sizes) if postgres and not args.skip_scaleout else None
            if scale:
                manager, agent_process = stack.restart(manager), stack.restart(agent_process)
                stack.wait_for_agent(agent)
            held = (connections.run(stack, [manager, agent_process], args.fanout, args.connection_agents)
                    if postgres and args.connection_agents and not args.skip_scaleout else None)
            if held:
                manager, agent_process = stack.restart(manager), stack.restart(agent_process)
                stack.wait_for_agent(agent)
            # Last: it leaves its executions waiting (a manager started after would carry them all on).
            waiting = (suspended.run(stack, [manager, agent_process], args.suspended, deliveries=args.deliveries,
                                     started=args.suspended_started, agent=agent) if args.suspended else [])
            failed = False
        finally:
            stack.close(failed=failed, out=sys.stderr)
            # Once no manager runs, every execution of the benchmark's workflows goes: those the
            # suspended case left waiting would be carried on by the next manager started on this
            # database (an advance each), and those the other cases ended would be the next run's
            # history (tens of thousands of operations a run).
            names = _workflows_of(bench_workflows.__name__)
            removed = retention.discard(Execution.objects.filter(workflow_id__in=names)).executions
            print(f"removed the {removed} executions the benchmark ran", file=sys.stderr)

    header = (f"{datetime.now(timezone.utc):%Y-%m-%d}, {platform.machine()} {os.cpu_count()} cores, "
              f"{connection.vendor}, broker {django.conf.settings.CELERY_BROKER_URL.split(':')[0]}, "
              f"`python -m bench --rounds {args.rounds} --fanout {args.fanout} --chain {args.chain} --starts {args.starts} "
              f"--suspended {','.join(map(str, args.suspended)) or 0} --deliveries {args.deliveries} "
              f"--suspended-started {args.suspended_started} --imperative {args.imperative} --history {args.history} "
              f"--children {args.children} --local {args.local} --connection-agents {','.join(map(str, args.connection_agents)) or 0}"
              f"{' --skip-scaleout' if args.skip_scaleout else ''}`, "
              f"one agent of concurrency 2, manager concurrency 2, Django DEBUG {'on' if django.conf.settings.DEBUG else 'off'}")
    sections = [header]
    if samples:
        sections.append(stop.report(samples, notes, GRACE))
    sections.append(throughput.report(rows))
    if waiting:
        sections.append(suspended.report(waiting))
    if replay:
        sections.append(imperative.report(replay))
    if local:
        sections.append(local_steps.report(local, local_sizes, dbos["chain"] if dbos else None))
    if tree:
        sections.append(children.report(tree))
    if large:
        sections.append(history.report(large))
    if scale:
        sections.append(scaleout.report(scale))
    if held:
        sections.append(connections.report(held))
    table = "\n\n".join(sections)
    print(table)
    if args.output:
        args.output.write_text(table + "\n")


def _workflows_of(module) -> list:
    """The names of the workflows ``module`` registers."""
    from workflows_app.registry import workflows  # once Django is set up, as main's imports

    return [name for name, definition in workflows().items() if definition.func.__module__ == module]


def _sizes(text):
    """``1000,100000`` -> (1000, 100000); ``0`` -> () (the case left out)."""
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"a comma-separated list of numbers, not {text!r}") from None
    if any(size < 0 for size in sizes):
        raise argparse.ArgumentTypeError("numbers of executions are 0 or more")
    return tuple(size for size in sizes if size)


if __name__ == "__main__":
    main()
