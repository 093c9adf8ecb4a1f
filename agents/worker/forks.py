"""Forks of a worker's pool processes that wait for the database work of its own threads.

SQLite keeps the locks a process holds on a database file in that process' memory. A process
forked while another thread of its parent is inside a write transaction inherits that memory,
the lock recorded as held and nobody left in it to release it, so it can never write: every
write in it fails with "database is locked" after the busy timeout. Celery forks a pool process
at start and again whenever one dies, which a kill causes, while the worker's own threads (its
heartbeat and ticks, the kill's report that the processes are gone, the shutdown's hand-back)
write to the database.

Those threads do their database work inside :func:`no_fork_meanwhile`, and every ``os.fork`` of
the process waits until none is inside it (``os.register_at_fork``). On PostgreSQL nothing needs
it; it costs a fork a few milliseconds at most there, so it is not made to depend on the vendor.
"""

import os
import threading
from contextlib import contextmanager

_lock = threading.RLock()


@contextmanager
def no_fork_meanwhile():
    """No fork of this process begins while the calling thread is inside this."""
    with _lock:
        yield


# The forking thread holds the lock across the fork, so no other thread is inside it then; in
# the child that thread is the only one, and it lets go of its copy as the parent does.
os.register_at_fork(before=_lock.acquire, after_in_parent=_lock.release, after_in_child=_lock.release)
