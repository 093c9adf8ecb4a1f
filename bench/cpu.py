"""Where a case's CPU goes: the CPU seconds (user + system) each part of the machine spent across
a measurement, from ``psutil``'s per-process counters.

The parts: the manager and the agent, each as its parent process and its Celery pool processes;
PostgreSQL's and Redis's server processes on this machine (every process named ``postgres`` or
``redis-server``: the backends of every client, the background writers); and the benchmark's own
process (which, on Celery's side, sends the canvas and waits for its results). Processes are
listed at the start of a measurement and read again at its end; one that exits in between
(an autovacuum worker, say) is left out, so the totals are a lower bound. Summed over the parts
and divided by the wall time, the CPU also says how busy the machine's cores were: a case that
keeps them less busy than another waits (for a commit's flush to disk, a message, a lock) where
the other computes.
"""

import os
import statistics
from contextlib import contextmanager

import psutil

PARTS = ("manager", "manager pool", "agent", "agent pool", "PostgreSQL", "Redis", "benchmark")
SERVERS = {"postgres": "PostgreSQL", "redis-server": "Redis"}


def _processes(manager_pid, agent_pid) -> dict:
    """Each part's processes, now."""
    parts = {part: [] for part in PARTS}
    for pid, part in ((manager_pid, "manager"), (agent_pid, "agent")):
        try:
            root = psutil.Process(pid)
            parts[part].append(root)
            parts[f"{part} pool"] += root.children(recursive=True)
        except psutil.NoSuchProcess:
            pass
    for process in psutil.process_iter(["name"]):
        part = SERVERS.get(process.info["name"] or "")
        if part:
            parts[part].append(process)
    parts["benchmark"].append(psutil.Process(os.getpid()))
    return parts


def _seconds(processes) -> dict:
    """CPU seconds of each process by pid (a process gone is left out)."""
    seconds = {}
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        seconds[process.pid] = times.user + times.system
    return seconds


class Meter:
    """``with meter.measure(count): ...``: the CPU of each part across the block, per unit of work
    (``count``), in milliseconds, appended to ``meter.samples`` when it ends."""

    def __init__(self, manager_pid, agent_pid):
        self.pids = manager_pid, agent_pid
        self.samples = []

    @contextmanager
    def measure(self, count):
        parts = _processes(*self.pids)
        before = {part: _seconds(processes) for part, processes in parts.items()}
        yield
        sample = {}
        for part, processes in parts.items():
            after = _seconds(processes)
            spent = sum(after[pid] - before[part].get(pid, after[pid]) for pid in after)
            sample[part] = spent / count * 1000
        self.samples.append(sample)


def median(samples) -> dict:
    """Each part's median over ``samples`` (dicts of part -> ms); ``"total"`` their sum."""
    parts = {part: statistics.median(sample[part] for sample in samples) for part in PARTS}
    return {**parts, "total": sum(parts.values())}


def describe(parts, wall_ms) -> str:
    """One line: the parts with any CPU, and how busy the machine's cores were over ``wall_ms``."""
    shares = ", ".join(f"{part} {parts[part]:.2f}" for part in PARTS if parts[part] >= 0.005)
    busy = parts["total"] / wall_ms / os.cpu_count() if wall_ms else 0
    return f"{shares}; cores busy {busy:.0%} of the time"


__all__ = ["Meter", "median", "describe", "PARTS"]
