"""Which deliveries of an attempt run at once, unasked, on the grant their message carries.

A manager sends an attempt with its grant (``workflows_app.engine.grants``), proved for this
agent. A delivery runs it without asking anyone when all of these hold (:func:`runs_unasked`):

* the broker does not mark the message redelivered (a message given back by a consumer that
  died, a channel closed, a visibility timeout: whoever had it may have started it);
* its grant has not expired, with a margin for the clocks (``wire.CLOCK_SKEW_SECONDS``): a message
  that waited in a queue or a prefetch buffer past it may have been superseded meanwhile;
* it was granted after this worker's broker connection (and its remote control) was last
  established: a stop a manager broadcast while the worker was away never reached it;
* this agent's journal takes it (``agents.worker.journal.begin``): no delivery started it here
  before, and no stop names it.

Any other delivery claims the attempt, as one without a grant does (``agents.runner``).

The moment the connection was established is the worker's main process' (its consumer
reconnects, the pool processes never connect for it): a consumer bootstep (:class:`Connected`)
writes it to memory the pool processes share with it, made before they fork. A worker without
that step (one Switchyard did not prepare) has none, and every delivery of it claims.
"""

import mmap
import struct
import time

from celery import bootsteps

from workflows_app import wire

_FORMAT = "d"
#: This worker's connection time, shared with every process forked from this one.
_shared = mmap.mmap(-1, struct.calcsize(_FORMAT))
_shared[:] = struct.pack(_FORMAT, float("inf"))


def connected_at() -> float:
    """When this worker's broker connection and remote control were last established (seconds
    since the epoch); infinity before that, or in a worker that does not record it."""
    return struct.unpack(_FORMAT, _shared[:])[0]


def mark_connected(moment=None):
    _shared[:] = struct.pack(_FORMAT, time.time() if moment is None else moment)


class Connected(bootsteps.StartStopStep):
    """A consumer step that records when the consumer's connection and its remote control are
    up (again): the consumer starts its steps anew each time it reconnects."""

    requires = ("celery.worker.consumer.control:Control",)

    def start(self, consumer):
        mark_connected()


def install(app):
    """Record the connection time in ``app``'s workers (``agents.worker.pool.prepare``)."""
    if Connected not in app.steps["consumer"]:
        app.steps["consumer"].add(Connected)


def is_grant(grant) -> bool:
    """Whether ``grant`` has what running an attempt takes (a manager made it: its proof was checked)."""
    return (isinstance(grant, dict) and all(isinstance(grant.get(name), str) for name in ("operation", "execution", "step"))
            and isinstance(grant.get("args"), list) and isinstance(grant.get("kwargs"), dict)
            and all(_number(grant.get(name)) for name in ("granted", "deadline", "retries_left")))


def why_asked(grant, delivery_info, now=None) -> str | None:
    """Why a delivery of a granted attempt must claim it rather than run unasked (a phrase for the
    log), or None when its message allows it — the journal is :func:`runs_unasked`'s last check."""
    now = time.time() if now is None else now
    if (delivery_info or {}).get("redelivered"):
        return "the broker delivers it again"
    if now >= grant["deadline"] - wire.CLOCK_SKEW_SECONDS:
        return "its grant expired"
    if grant["granted"] - wire.CLOCK_SKEW_SECONDS < connected_at():
        return "it was granted before this worker's broker connection"
    return None


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
