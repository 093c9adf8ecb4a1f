"""A PostgreSQL cluster of the test's own, so that a chaos test can stop and restart the database
(the database outage) without touching the machine's.

    cluster = PostgresCluster.create()      # initdb + pg_ctl start on a free port
    with cluster.serving_django("switchyard"):   # the test process' default connection, migrated
        stack = ...                          # children started now see this database
        cluster.restart(mode="immediate", down_for=10)
    cluster.destroy()

The machine's binaries (``/usr/lib/postgresql/<version>/bin``) run as the ``postgres`` user, as
they must when the tests run as root; the cluster lives in a directory of its own under the
system's temporary directory (the user ``postgres`` cannot enter pytest's, which is root's).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
from django.core.management import call_command
from django.db import connections

from tests.integration.harness import free_port


def binaries() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` with ``initdb``, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


class PostgresCluster:
    """One ``initdb`` cluster on 127.0.0.1 and a free port, trust authentication."""

    def __init__(self, directory: Path, port: int):
        self.directory = Path(directory)
        self.data = self.directory / "data"
        self.log = self.directory / "postgres.log"
        self.port = port
        self.restarts = 0

    @classmethod
    def create(cls) -> PostgresCluster:
        if binaries() is None:
            raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin")
        directory = Path(tempfile.mkdtemp(prefix="switchyard-pg-"))
        cluster = cls(directory, free_port())
        cluster._chown(directory)
        cluster._as_postgres("initdb", "-D", cluster.data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8")
        with open(cluster.data / "postgresql.conf", "a") as conf:
            # Durable as a production server is: an immediate shutdown must lose no commit.
            conf.write(f"\nport = {cluster.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{directory}'\n"
                       "max_connections = 200\n")
        cluster.start()
        return cluster

    # --- control ---------------------------------------------------------------------------
    def start(self):
        self._as_postgres("pg_ctl", "-D", self.data, "-l", self.log, "-w", "-t", "60", "start")

    def stop(self, mode="fast"):
        """``pg_ctl stop -m fast`` (clients disconnected, a clean shutdown) or ``immediate``
        (no shutdown at all: crash recovery at the next start)."""
        self._as_postgres("pg_ctl", "-D", self.data, "-m", mode, "-w", "-t", "60", "stop")

    def restart(self, mode="fast", down_for=0.0):
        """Stop, stay down ``down_for`` seconds, start again."""
        self.stop(mode)
        time.sleep(down_for)
        self.start()
        self.restarts += 1

    def running(self) -> bool:
        return subprocess.run(self._argv("pg_ctl", "-D", self.data, "status"), capture_output=True).returncode == 0

    def destroy(self):
        with contextlib.suppress(subprocess.CalledProcessError):
            if self.running():
                self.stop("immediate")
        shutil.rmtree(self.directory, ignore_errors=True)

    # --- databases ---------------------------------------------------------------------------
    def url(self, dbname) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, dbname):
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{dbname}"')

    @contextlib.contextmanager
    def serving_django(self, dbname="switchyard"):
        """Point the test process' ``default`` connection at a new database of this cluster,
        migrated, for the ``with`` block (children started inside it inherit it through the
        harness' ``DATABASE_URL``); the test's own database is back afterwards."""
        self.create_database(dbname)
        connection = connections["default"]
        saved = dict(connection.settings_dict)
        connection.close()
        connection.settings_dict.update(HOST="127.0.0.1", PORT=str(self.port), NAME=dbname, USER="postgres", PASSWORD="")
        try:
            call_command("migrate", verbosity=0, interactive=False)
            yield connection
        finally:
            with contextlib.suppress(Exception):
                connection.close()
            connection.settings_dict.clear()
            connection.settings_dict.update(saved)

    def log_tail(self, lines=60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    # --- running the binaries as postgres --------------------------------------------------
    def _argv(self, program, *args):
        argv = [str(binaries() / program), *map(str, args)]
        return argv if os.getuid() != 0 else ["runuser", "-u", "postgres", "--", *argv]

    def _as_postgres(self, program, *args):
        result = subprocess.run(self._argv(program, *args), capture_output=True, text=True, cwd=self.directory)
        if result.returncode != 0:
            raise RuntimeError(f"{program} failed ({result.returncode}): {result.stdout}{result.stderr}\n{self.log_tail()}")
        return result

    def _chown(self, path):
        if os.getuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(path, user.pw_uid, user.pw_gid)
