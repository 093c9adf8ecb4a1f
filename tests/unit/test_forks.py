"""A pool process forked while a thread of its worker writes to SQLite can write all the same
(``agents.worker.forks``). Plain ``sqlite3`` on a file of the test's own; no services."""

import os
import sqlite3
import threading

from agents.worker.forks import no_fork_meanwhile

HOLD_SECONDS = 0.5
CHILD_TIMEOUT_SECONDS = 3.0


def writes_after_a_fork_during_a_transaction(path, guard) -> bool:
    """A thread opens a write transaction (inside ``guard``) and commits it HOLD_SECONDS later;
    meanwhile this thread forks a child that inserts a row. Whether the child could."""
    with sqlite3.connect(path) as setup:
        setup.execute("create table t (x)")
    inside = threading.Event()

    def write():
        with guard():
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            conn.execute("begin immediate")
            conn.execute("insert into t values ('thread')")
            inside.set()
            threading.Event().wait(HOLD_SECONDS)
            conn.execute("commit")
            conn.close()

    writer = threading.Thread(target=write)
    writer.start()
    inside.wait()
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        try:
            conn = sqlite3.connect(path, timeout=CHILD_TIMEOUT_SECONDS)
            conn.execute("insert into t values ('child')")
            conn.commit()
        except BaseException:
            os._exit(1)
        os._exit(0)
    writer.join()
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


class _Unguarded:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_without_the_guard_a_child_forked_during_a_write_can_never_write(tmp_path):
    """Why the guard exists: the child waits out its whole busy timeout although the thread's
    transaction ended long before it ran out."""
    assert not writes_after_a_fork_during_a_transaction(str(tmp_path / "db.sqlite3"), _Unguarded)


def test_a_fork_waits_for_a_thread_inside_the_guard_and_the_child_writes(tmp_path):
    path = str(tmp_path / "db.sqlite3")
    assert writes_after_a_fork_during_a_transaction(path, no_fork_meanwhile)
    with sqlite3.connect(path) as conn:
        assert sorted(row[0] for row in conn.execute("select x from t")) == ["child", "thread"]
