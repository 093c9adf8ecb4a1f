"""Several executions acted on at once: threads of the calling process, each with a database
connection of its own (``workflows_app.bulk.run``).

One action at a time spends most of its time waiting: for its queries, for its commit to be
written, for the broker. Done one after the other, ten thousand of them wait ten thousand times
in a row; a few threads overlap those waits (and the database writes their commits together).
Each action is still the one-at-a-time service in its own transaction, on its thread's own
connection, so nothing else changes: the same checks, the same row locks taken in the same
order a concurrent request would take them.

Hazards: every thread opens a connection of its own (``WORKERS`` more per bulk action at most,
closed at its end), and sees only what is committed — a caller inside a transaction must not
hand its work to threads (``run.act`` does not). What a thread raises is raised to the caller,
once every thread has ended.
"""

import contextlib
import queue
import threading

from django.db import connections

_END = object()


def each(function, items, workers, around=contextlib.nullcontext):
    """Call ``function(item)`` for each of ``items`` on ``workers`` threads, as they come, and
    return once all are done; each thread runs inside ``around()`` of its own. A call that returns
    False stops the rest: no item is started after it (those under way end). An exception a call
    (or ``around``) raises stops them too, and is raised here."""
    todo = queue.Queue(maxsize=workers * 2)  # a few items ahead of the threads, not the whole selection
    stop = threading.Event()
    raised = []

    def work():
        try:
            with around():
                while (item := todo.get()) is not _END:
                    if stop.is_set():
                        continue  # drained, so that the loop below never waits on a full queue
                    try:
                        if function(item) is False:
                            stop.set()
                    except BaseException as exc:  # raised to the caller below, the first one
                        raised.append(exc)
                        stop.set()
        except BaseException as exc:  # what ``around`` raised as it ended
            raised.append(exc)
            stop.set()
        finally:
            connections.close_all()  # this thread's own

    threads = [threading.Thread(target=work, name=f"switchyard-bulk-{n}", daemon=True) for n in range(workers)]
    for thread in threads:
        thread.start()
    try:
        for item in items:
            if stop.is_set():
                break
            _put(todo, item, threads)
    finally:
        for _ in threads:
            _put(todo, _END, threads)
        for thread in threads:
            thread.join()
    if raised:
        raise raised[0]


def _put(todo, item, threads):
    """``todo.put(item)``, but never waiting on a full queue that no live thread takes from (every
    thread ended on an error): the item is then dropped, and the error raised."""
    while any(thread.is_alive() for thread in threads):
        try:
            todo.put(item, timeout=0.1)
            return
        except queue.Full:
            continue
