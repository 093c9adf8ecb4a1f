"""What each pytest-xdist worker keeps to itself, so that tests side by side run as they run alone.

``make test`` runs the suite in several worker processes (``-n``). pytest-django gives each worker
a test database of its own (``test_test_gw0``, ``test-switchyard.sqlite3_gw0``); a test's queues,
ports and temporary directories are its own already (the stack's suffix, ``free_port``,
``tmp_path``). This module gives each worker the rest, in the environment, before the settings
read it (``tests/settings.py``), so that every process a test starts inherits it too:

* a var directory of its own, ``<var>/workers/gw0``: the agents' records, the secret key and, on
  the embedded defaults, an embedded Redis of its own;
* on Redis, a database number of its own for the broker and the result backend
  (``redis://…/0`` becomes ``/1`` for ``gw0``, ``/2`` for ``gw1``…): Celery's broadcasts
  (remote control, the kill) and its events (Flower) reach only the worker's own processes;
* on RabbitMQ, a virtual host of its own, made when the worker starts and deleted when it ends
  (``rabbitmqctl``, on the machine that runs the broker), for the same reason.

Without xdist (``-n 0``, or a test run by itself) nothing changes.

Tests that share a fixture built once per module (a wheel installed in a virtualenv, a large
history) run on one worker, as one group (:func:`group_shared_fixtures`, ``--dist loadgroup``):
spread over four, each would build it again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Redis' default number of databases (``databases`` in redis.conf).
REDIS_DATABASES = 16
LOOPBACK = {"127.0.0.1", "localhost", "::1", ""}
#: Set once a worker's environment is its own: the processes its tests start inherit both that
#: environment and ``PYTEST_XDIST_WORKER``, and must not move it once more.
ISOLATED_ENV = "SWITCHYARD_TEST_WORKER"


class IsolationError(RuntimeError):
    """A worker cannot be given a broker of its own."""


def worker() -> str | None:
    """This process' xdist worker id (``gw0``…), or None outside a parallel run."""
    return os.environ.get("PYTEST_XDIST_WORKER") or None


def _index(worker_id: str) -> int:
    return int(worker_id.removeprefix("gw"))


def redis_url(url: str, worker_id: str) -> str:
    """``url`` on the database after its own numbered for the worker."""
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    number = base + 1 + _index(worker_id)
    if number >= REDIS_DATABASES:
        raise IsolationError(f"{url}: worker {worker_id} would need Redis database {number}; Redis has "
                             f"{REDIS_DATABASES} (run fewer workers: make test WORKERS=…)")
    return urlunsplit(parts._replace(path=f"/{number}"))


def vhost(worker_id: str) -> str:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")[:8]
    return f"switchyard-test-{run}-{worker_id}"


def amqp_url(url: str, worker_id: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + quote(vhost(worker_id), safe="")))


def _per_worker(url: str, worker_id: str) -> str:
    if url.startswith(("redis://", "rediss://")):
        return redis_url(url, worker_id)
    if url.startswith(("amqp://", "amqps://", "pyamqp://")):
        return amqp_url(url, worker_id)
    return url


def isolate(environ=os.environ) -> None:
    """Point this worker's environment at its own var directory and broker namespace."""
    worker_id = worker()
    if worker_id is None or environ.get(ISOLATED_ENV) == worker_id:
        return
    environ[ISOLATED_ENV] = worker_id
    base = Path(environ.get("SWITCHYARD_VAR_DIR") or ROOT / "var")
    environ["SWITCHYARD_VAR_DIR"] = str(base / "workers" / worker_id)
    for name in ("CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
        if environ.get(name):
            environ[name] = _per_worker(environ[name], worker_id)


#: The scopes of a fixture built once for several tests of a module.
SHARED_SCOPES = ("package", "module", "class")


def group_shared_fixtures(items) -> None:
    """Put in one xdist group (the module's) every test that uses a fixture of the test suite's
    built once per module, class or package (pytest-xdist's ``--dist loadgroup`` runs a group on
    one worker, and starts the groups first)."""
    for item in items:
        fixturedefs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
        if any(fixturedef.baseid and fixturedef.scope in SHARED_SCOPES
               for definitions in fixturedefs.values() for fixturedef in definitions):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


def _rabbitmqctl(broker_url, *args):
    host = urlsplit(broker_url).hostname or ""
    ctl = shutil.which("rabbitmqctl")
    if ctl is None or host not in LOOPBACK:
        raise IsolationError(f"each test worker needs a RabbitMQ virtual host of its own, made with rabbitmqctl on "
                             f"this machine's RabbitMQ ({host or 'no host'}): run with one worker (make test WORKERS=0)")
    done = subprocess.run([ctl, "-q", *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise IsolationError(f"rabbitmqctl {' '.join(args)}: {(done.stderr or done.stdout).strip()}")


def open_broker(broker_url: str) -> None:
    """Make the worker's virtual host (RabbitMQ) before anything connects to it."""
    worker_id = worker()
    if worker_id is None or not broker_url.startswith(("amqp://", "amqps://", "pyamqp://")):
        return
    user = urlsplit(broker_url).username or "guest"
    _rabbitmqctl(broker_url, "add_vhost", vhost(worker_id))
    _rabbitmqctl(broker_url, "set_permissions", "-p", vhost(worker_id), user, ".*", ".*", ".*")


def close_broker(broker_url: str) -> None:
    """Delete the worker's virtual host, and with it every queue its tests left."""
    worker_id = worker()
    if worker_id is None or not broker_url.startswith(("amqp://", "amqps://", "pyamqp://")):
        return
    _rabbitmqctl(broker_url, "delete_vhost", vhost(worker_id))
