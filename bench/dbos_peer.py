"""DBOS beside Switchyard: the same fan-out and chain of no-ops on DBOS (dbos-transact), a durable
peer, on the same PostgreSQL server, in the same run (when ``dbos`` is installed:
``requirements/bench.txt``).

* The fan-out is a DBOS workflow that enqueues N no-op steps on a DBOS ``Queue`` and waits for
  them: DBOS's distributed path, where its queue's runners take them from the database.
* The chain is a DBOS workflow that calls M no-op steps one after the other. They run inside
  the workflow's own process with no worker hop: the floor of a design without a hop, which a
  broker hop cannot reach, shown beside Switchyard's chain, not a target.

DBOS keeps its state in a system database of its own on the same server
(``<the benchmark's database>_dbos``, which DBOS makes when it is missing).
"""

import statistics
import sys
import time

from django.db import connection

#: The queue's polling interval: how long an enqueued step may wait for DBOS's queue runner
#: (DBOS's default, 1 s, would measure the poll rather than the path).
POLL_SECONDS = 0.01

#: DBOS's queue of the fan-out.
QUEUE = "switchyard-bench"

_registered = {}


def available() -> bool:
    """Whether the DBOS cases can run: ``dbos`` is installed and the database is PostgreSQL."""
    if connection.vendor != "postgresql":
        return False
    try:
        import dbos  # noqa: F401
    except ImportError:
        return False
    return True


def system_database_url() -> str:
    settings = connection.settings_dict
    user = settings.get("USER") or "postgres"
    password = f":{settings['PASSWORD']}" if settings.get("PASSWORD") else ""
    host, port = settings.get("HOST") or "127.0.0.1", settings.get("PORT") or 5432
    return f"postgresql://{user}{password}@{host}:{port}/{settings['NAME']}_dbos"


def _register():
    """DBOS's workflows and steps (once a process: DBOS registers them globally, before it launches).
    The fan-out's queue is registered once DBOS runs (:func:`run`): DBOS keeps queues in its database."""
    if _registered:
        return _registered
    from dbos import DBOS

    @DBOS.step()
    def noop():
        return None

    @DBOS.workflow()
    def fan_out(n):
        queue = _registered["queue"]
        handles = [queue.enqueue(noop) for _ in range(n)]
        for handle in handles:
            handle.get_result()

    @DBOS.workflow()
    def chain(m):
        for _ in range(m):
            noop()

    _registered.update(fan_out=fan_out, chain=chain)
    return _registered


def run(rounds, sizes) -> dict:
    """``{"fanout": [seconds], "chain": [seconds]}``: ``rounds`` of each, after a warm-up."""
    from dbos import DBOS

    functions = _register()
    DBOS(config={"name": "switchyard-bench", "system_database_url": system_database_url(),
                 "run_admin_server": False})
    DBOS.launch()
    try:
        functions["queue"] = DBOS.register_queue(QUEUE, polling_interval_sec=POLL_SECONDS, on_conflict="always_update")
        functions["fan_out"](2)
        functions["chain"](2)
        times = {"fanout": [], "chain": []}
        for round_ in range(1, rounds + 1):
            for key, size in (("fanout", sizes["fanout"]), ("chain", sizes["chain"])):
                began = time.monotonic()
                functions["fan_out" if key == "fanout" else "chain"](size)
                times[key].append(time.monotonic() - began)
                print(f"round {round_}: DBOS {key} of {size}: {times[key][-1]:.3f} s", file=sys.stderr, flush=True)
        return times
    finally:
        DBOS.destroy(destroy_registry=False)


def rows(times, throughput_rows, sizes, Row) -> list:
    """The DBOS rows of the throughput table: Switchyard's fan-out and chain (the lists of
    ``throughput_rows``, measured in the same run) in its column, DBOS's in the other."""
    n, m = sizes["fanout"], sizes["chain"]
    fan_out = next(row for row in throughput_rows if row.case == f"fan-out: {n} no-ops")
    chain = next(row for row in throughput_rows if row.case == f"chain: {m} sequential no-ops")
    return [
        Row(f"fan-out: {n} no-ops, DBOS queue (a DBOS workflow enqueueing {n} no-op steps on a Queue and "
            "waiting for them)", fan_out.switchyard, times["fanout"],
            note=f"Switchyard: the fan-out's; the other column is DBOS's, not Celery's. DBOS: "
                 f"{n / statistics.median(times['fanout']):.0f} steps/s"),
        Row(f"chain: {m} sequential no-ops, per step, DBOS steps (in the workflow's own process, no hop)",
            [v / m * 1000 for v in chain.switchyard], [v / m * 1000 for v in times["chain"]], unit="ms",
            note="Switchyard: the chain's; the other column is DBOS's, not Celery's: a design without a hop"),
    ]
