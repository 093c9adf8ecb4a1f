"""Live runs: a workflow function kept suspended in memory between passes, so that a pass goes
on from where the last one stopped instead of replaying the function from the top.

Replay alone makes an imperative workflow quadratic: the k-th step replays k−1 steps and loads
every stored operation. So each dispatcher process keeps up to ``WORKFLOW_CACHE_SIZE`` runs
(Temporal's sticky cache): the function runs in a greenlet — a stack frozen in memory, not a
thread or a process — that switches back to the dispatcher where replay would have raised
``Suspend``. The next pass of that execution in the same process brings the context up to date
from the database and switches back in; the wait that suspended looks again and goes on.

The database stays the truth; a run is only a shortcut to it:

- A run is kept only once its pass committed (``on_commit``): a pass that rolled back leaves
  nothing in memory that the database does not hold.
- ``Execution.passes`` counts the dispatcher's passes. A run that missed one was overtaken by a
  pass in another process (or on another manager): its context is loaded again in full, and it
  goes on from its own point — replaying forward only the steps it missed.
- A kill or a resume renews the execution's token: a run of another token is dropped. So is a
  run when a step's failure is not handled yet (the failure mode runs first, then a replay).
- The least recently used run is evicted past ``WORKFLOW_CACHE_SIZE`` (0: always replay). An
  evicted run is unwound at once (``GreenletExit`` where it waits, ``finally`` blocks run) and
  the context refuses every call while it is not in its pass; its next pass replays.

A pass on a fresh process or after an eviction replays exactly as it always did, so the two
paths give the same result for a deterministic workflow (workflow code must be deterministic).
"""

import threading
from collections import OrderedDict

import greenlet
from django.db import transaction

from workflows_app.conf import workflows_settings
from workflows_app.engine.context import WorkflowContext
from workflows_app.engine.handles import Suspend
from workflows_app.states import ExecutionStatus


class Run:
    """One run of a workflow function: in a greenlet when the cache is on, else a plain call
    that replay ends with ``Suspend``."""

    def __init__(self, replay, func, parameters, *, live):
        self.replay = replay
        self.passes = None
        self._func, self._parameters = func, parameters
        self._greenlet = greenlet.greenlet(self._main) if live else None
        if live:
            replay.attach(self)

    def _main(self):
        return self._func(WorkflowContext(self.replay), **self._parameters)

    @property
    def live(self):
        return self._greenlet is not None

    def step(self):
        """Run the function until it returns, raises or suspends; a ``Suspend`` when it
        suspended, else ``None``. What the function raised is raised here."""
        if not self.live:
            try:
                self._main()
            except Suspend as exc:
                return exc
            return None
        # The dispatcher that resumes it is the one it comes back to.
        self._greenlet.parent = greenlet.getcurrent()
        self.replay.enter_pass()
        try:
            outcome = self._greenlet.switch()
        finally:
            self.replay.leave_pass()
        return None if self._greenlet.dead else outcome

    def suspend(self, name):
        """Called in the function: back to the dispatcher until the next pass resumes it."""
        self._greenlet.parent.switch(Suspend(name))

    @property
    def suspended(self):
        return self.live and bool(self._greenlet) and not self._greenlet.dead

    def close(self):
        """Unwind a suspended run now (its context refuses every call meanwhile), and let its
        context go: it keeps refusing, in the place of the run (:data:`CLOSED`)."""
        if self.suspended:
            self._greenlet.parent = greenlet.getcurrent()
            self._greenlet.throw(greenlet.GreenletExit)
        if self.live:
            self.replay.attach(CLOSED)


class _Closed:
    """What a closed run's context holds instead of the run: every call is still refused, and
    the two no longer refer to each other. As a reference cycle they would wait for one of the
    garbage collector's rare full passes, a kilobyte of memory or so per run until then, which
    the memory of waiting executions measured as growth."""

    def suspend(self, name):
        raise greenlet.GreenletExit("this run of the workflow was closed; its next pass replays it")


CLOSED = _Closed()


class _Cache(threading.local):
    """Each thread's runs (a greenlet lives in the thread that made it), least recently used
    first."""

    def __init__(self):
        self.runs = OrderedDict()


_cache = _Cache()


def enabled() -> bool:
    return workflows_settings.WORKFLOW_CACHE_SIZE > 0


def start(replay, func, parameters) -> Run:
    return Run(replay, func, parameters, live=enabled())


def take(execution):
    """The kept run of ``execution`` (taken out of the cache), brought up to date with the
    database, or ``None`` when there is none or it cannot go on (then it is closed)."""
    run = _cache.runs.pop(execution.pk, None)
    if run is None:
        return None
    if run.replay.execution.token_hash != execution.token_hash or not run.replay.catch_up(execution, run.passes):
        run.close()
        return None
    return run


def keep(run, execution):
    """Keep a run that suspended, once its pass commits (a pass that rolls back keeps none)."""
    if not (run.suspended and execution.status == ExecutionStatus.STARTED and enabled()):
        run.close()
        return
    run.passes = execution.passes
    transaction.on_commit(lambda: _put(execution.pk, run))


def _put(execution_id, run):
    runs = _cache.runs
    older = runs.pop(execution_id, None)
    if older is not None and older is not run:
        older.close()
    runs[execution_id] = run
    while len(runs) > workflows_settings.WORKFLOW_CACHE_SIZE:
        _, evicted = runs.popitem(last=False)
        evicted.close()


def forget(execution_id):
    """Close the kept run of an execution that ends or cannot go on."""
    run = _cache.runs.pop(execution_id, None)
    if run is not None:
        run.close()


def cached(execution_id) -> bool:
    """Whether this thread keeps a run of the execution (for tests and the benchmark)."""
    return execution_id in _cache.runs


def clear():
    """Close every kept run of this thread."""
    while _cache.runs:
        _, run = _cache.runs.popitem()
        run.close()
