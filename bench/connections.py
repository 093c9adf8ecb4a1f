"""Database connections a deployment holds, with 1 agent and with 20 (PostgreSQL only).

For each number of agents (``counts``; ``python -m bench --connection-agents``, 1 and 20 unless it
says otherwise): one manager (concurrency 2) and that many agents (concurrency 1 each, named
``conn-agent-<k>``), all online; then a fan-out of ``n`` no-ops spread over the agents (one
execution per agent, started together) while a thread samples, every ``SAMPLE`` seconds, how many
backends are connected to this database (``pg_stat_activity``) other than this process' own. The
row gives the most seen during the run. Agents hold broker credentials only, so the number is the
manager's whatever the number of agents; each agent's process that held a connection would add
one. It stops the benchmark's own manager and agent first (each configuration has exactly the
processes it names): the caller starts them again.
"""

import threading
import time
from dataclasses import dataclass

from django.db import connection, connections

from bench.scaleout import _wait_all_completed
from workflows_app import services

SAMPLE = 0.05


@dataclass
class Row:
    agents: int
    connections: int
    seconds: float


class _Sampler(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.stop, self.most = threading.Event(), 0

    def run(self):
        try:
            with connection.cursor() as cursor:
                while not self.stop.is_set():
                    cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                   "AND pid <> pg_backend_pid()")
                    self.most = max(self.most, cursor.fetchone()[0])
                    time.sleep(SAMPLE)
        finally:
            connections.close_all()


def run(stack, processes, n, counts) -> list[Row]:
    for process in processes:
        stack.stop(process)
    rows = []
    for count in counts:
        started = [stack.start_manager(concurrency=2, name=f"conn-manager-{count}")]
        names = [stack.agent_name(f"conn-agent-{count}-{k}") for k in range(1, count + 1)]
        started += [stack.start_agent(name, concurrency=1) for name in names]
        for name in names:
            stack.wait_for_agent(name, timeout=120)
        sampler = _Sampler()
        sampler.start()
        asked = time.monotonic()
        ids = [services.start("bench_fan_out", {"n": max(1, n // count), "agent": name}).pk for name in names]
        seconds = _wait_all_completed(ids) - asked
        sampler.stop.set()
        sampler.join()
        rows.append(Row(count, sampler.most, seconds))
        for process in started:
            stack.stop(process)
    return rows


def report(rows) -> str:
    lines = ["| database connections (1 manager of concurrency 2; agents of concurrency 1) | most connected during a "
             "fan-out | fan-out (s) |", "|---|---|---|"]
    lines += [f"| {row.agents} agent{'s' if row.agents > 1 else ''} | {row.connections} | {row.seconds:.2f} |" for row in rows]
    return "\n".join(lines)
