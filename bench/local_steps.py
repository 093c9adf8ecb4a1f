"""Local steps: a chain of no-op steps that run inside the manager's pass (``local=True``), per
step, beside the same chain of agent steps, a plain Celery ``chain`` link and DBOS's sequential
steps, in the same run.

A local step has no message and no agent: the pass that reaches it stores it, moves it to
``started`` and commits, calls the function in its own process, stores the result in the next
transaction and resumes the workflow, in the same pass. So the chain (``bench_local_chain``: M
no-op steps, each awaited with ``ctx.await_execute(..., local=True)`` before the next is asked
for) is one advance message and a loop of commits, where the agent chain
(``bench_imperative_chain``, the same workflow with ``agent=``) makes per step an operation's
four messages (the step, its claim, the answer, its outcome) and an advance. DBOS's steps also run in the workflow's
own process with no hop: the design a local step takes, so DBOS is the peer to measure it by.

Each round measures, one after the other so that they share the machine's conditions: the local
chain of M, the agent chain of M, a Celery ``chain`` of M immutable no-ops (per link), and the
local chain of J steps (``--local J``; at the defaults 1,000 against 100: is the per-step cost
the same at ten times the length?). DBOS's chain is the one ``bench/dbos_peer.py`` measured
earlier in the same run.
"""

import statistics
import sys

from bench.throughput import _celery, _switchyard
from bench.workflows import CELERY_NOOP

DEFAULT_SIZES = {"short": 100, "long": 1000}

#: The targets the report states (not asserted: a benchmark measures, it does not pass or fail).
DBOS_TARGET, DBOS_STRETCH = 1.0, 0.5


def run(agent, rounds, sizes=None) -> dict:
    """``{"local", "agent", "celery", "local long"}``: lists of seconds per step, one per round,
    after an untimed warm-up of each. ``"celery"`` is empty without a result backend."""
    from celery import chain

    from switchyard.celery import app

    sizes = {**DEFAULT_SIZES, **(sizes or {})}
    short, long_ = sizes["short"], sizes["long"]
    noop = app.signature(CELERY_NOOP, queue=agent, immutable=True)
    has_backend = bool(app.conf.result_backend)

    _switchyard("bench_local_chain", {"m": 2})  # warm-up, untimed
    _switchyard("bench_imperative_chain", {"m": 2, "agent": agent})
    if has_backend:
        _celery(chain([noop.clone() for _ in range(2)]))

    times = {"local": [], "agent": [], "celery": [], "local long": []}
    for round_ in range(1, rounds + 1):
        measured = [("local", short, lambda: _switchyard("bench_local_chain", {"m": short})),
                    ("agent", short, lambda: _switchyard("bench_imperative_chain", {"m": short, "agent": agent}))]
        if has_backend:
            measured.append(("celery", short, lambda: _celery(chain([noop.clone() for _ in range(short)]))))
        measured.append(("local long", long_, lambda: _switchyard("bench_local_chain", {"m": long_})))
        for key, size, measure in measured:
            times[key].append(measure() / size)
            print(f"round {round_}: {key} chain of {size}: {times[key][-1] * 1000:.2f} ms per step",
                  file=sys.stderr, flush=True)
    return times


def rows(times, sizes=None, dbos=None) -> list:
    """``(case, the local step's ms per step, the other's, the other's name, target)`` of
    :func:`report`, each a list of one value per round; ``dbos``: DBOS's chain of M, seconds per round
    (``dbos_peer.run(...)["chain"]``), when it ran."""
    sizes = {**DEFAULT_SIZES, **(sizes or {})}
    short, long_ = sizes["short"], sizes["long"]
    local = _ms(times["local"])
    out = []
    if dbos:
        out.append((f"chain of {short} local no-op steps, per step / DBOS's sequential steps (no hop either; "
                    "measured earlier in the same run)", local, [seconds / short * 1000 for seconds in dbos], "DBOS",
                    f"below {DBOS_TARGET:g}; stretch: at most {DBOS_STRETCH:g}"))
    if times["celery"]:
        out.append((f"chain of {short} local no-op steps, per step / a Celery `chain` link (a chain of {short}, "
                    "beside it each round)", local, _ms(times["celery"]), "Celery", ""))
    out.append((f"chain of {short} local no-op steps, per step / the same chain of agent steps "
                "(`bench_imperative_chain`, beside it each round)", local, _ms(times["agent"]), "agent steps", ""))
    out.append((f"chain of {long_} local no-op steps, per step / the chain of {short}", _ms(times["local long"]), local,
                f"local, {short}", "about 1: linear in the length"))
    return out


def report(times, sizes=None, dbos=None) -> str:
    """A table of its own: its other column is DBOS's, Celery's, the agent chain's or its own at
    the short length, and each row says which (the throughput table's is Celery's throughout)."""
    lines = ["| local steps case | local step, median (ms) | the other, median (ms) | ratio | target | rounds of the "
             "local step (ms) |", "|---|---|---|---|---|---|"]
    for case, local, other, name, target in rows(times, sizes, dbos):
        a, b = statistics.median(local), statistics.median(other)
        if name == "DBOS":
            target = (f"below {DBOS_TARGET:g}: {'met' if a / b < DBOS_TARGET else 'missed'}; stretch, at most "
                      f"{DBOS_STRETCH:g}: {'met' if a / b <= DBOS_STRETCH else 'missed'}")
        lines.append(f"| {case} | {a:.2f} | {b:.2f} ({name}) | **{a / b:.2f}** | {target} | "
                     f"{min(local):.2f}–{max(local):.2f} |")
    return "\n".join(lines)


def _ms(seconds_per_step) -> list:
    return [value * 1000 for value in seconds_per_step]


__all__ = ["run", "rows", "report", "DEFAULT_SIZES"]
