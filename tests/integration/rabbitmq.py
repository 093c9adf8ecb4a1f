"""A RabbitMQ node of the test's own, so that a test can restart its broker or give it a short
``consumer_timeout`` without touching the machine's RabbitMQ (which other test runs share).

::

    with RabbitMQNode(tmp_path / "rabbitmq", consumer_timeout_ms=4000) as node:
        ...                  # processes with CELERY_BROKER_URL=node.url (test_rabbitmq.OnNode)
        node.restart()       # durable queues and their persistent messages survive
        node.queues()        # {"mgmt-…": {"type": "classic", "durable": True, "messages": 0}, …}

Everything the node keeps is under its work directory: its database (``mnesia``), logs,
configuration, plugin list (empty: no plugin is started) and Erlang cookie (``HOME``); it
listens on free ports of the loopback interface under a node name of its own. Only ``epmd``, the
Erlang port mapper every node on the host registers with, is shared (the node starts it if it
does not run, as any RabbitMQ does, and leaves it running).

The server runs in a process group of its own: :meth:`stop` ends it gracefully (SIGTERM to
RabbitMQ's script, which stops the Erlang node as ``rabbitmqctl stop`` does: queues and messages
are written out), :meth:`kill` as a crash, and both leave no process of it behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import psutil

from tests.integration.harness import free_port

#: Where Debian keeps RabbitMQ's own scripts. Its ``/usr/sbin/rabbitmq-server`` only wraps them
#: to switch to the ``rabbitmq`` user when run as root, a user that could not write in the test's
#: directory: the scripts themselves are run, as whoever runs the tests.
SCRIPT_DIRS = ("/usr/lib/rabbitmq/bin",)
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
#: How often the node's channels look for a delivery left unacknowledged longer than
#: ``consumer_timeout`` (RabbitMQ 3.10 checks on its channel tick, ``channel_tick_interval``: a
#: minute by default; the ``x-consumer-timeout`` queue argument and policy key came after 3.10).
TICK_MS = 1000


def script(name) -> str | None:
    """The path of RabbitMQ's script ``name`` (``rabbitmq-server``, ``rabbitmqctl``), or None."""
    return shutil.which(name, path=os.pathsep.join([*SCRIPT_DIRS, os.environ.get("PATH", "")]))


def available() -> bool:
    return script("rabbitmq-server") is not None and script("rabbitmqctl") is not None


class RabbitMQNode:
    """A RabbitMQ server under ``workdir``; ``consumer_timeout_ms`` sets its ``consumer_timeout``
    (RabbitMQ's default is 30 minutes) and makes its channels check it every second."""

    def __init__(self, workdir, *, consumer_timeout_ms=None, user="guest", password="guest"):
        self.workdir = Path(workdir).resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.consumer_timeout_ms = consumer_timeout_ms
        self.user, self.password = user, password
        self.nodename = f"switchyard-test-{uuid.uuid4().hex[:10]}@localhost"
        self.port = free_port()
        self.dist_port = free_port()
        self.process: subprocess.Popen | None = None
        self.starts = 0
        self._seen: dict[int, psutil.Process] = {}  # every process of the node seen, for the last sweep

    # --- addresses --------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"amqp://{self.user}:{self.password}@127.0.0.1:{self.port}//"

    @property
    def log_path(self) -> Path:
        return self.workdir / "log" / f"{self.nodename}.log"

    # --- life -------------------------------------------------------------------------------
    def start(self) -> RabbitMQNode:
        """Start the server (on the same ports, data and configuration every time) and wait
        until it takes AMQP connections."""
        if self.process is not None and self.process.poll() is None:
            return self
        self._write_configuration()
        self.starts += 1
        out = open(self.workdir / f"server.{self.starts}.out", "ab", buffering=0)
        try:
            self.process = subprocess.Popen([script("rabbitmq-server")], cwd=self.workdir, env=self._environment(),
                                            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        finally:
            out.close()
        self._wait_until_it_answers()
        self._remember_processes()
        return self

    def stop(self, timeout=STOP_TIMEOUT):
        """Shut the node down gracefully; SIGKILL what is left after ``timeout`` s."""
        if self.process is None:
            return
        self._remember_processes()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)  # the script stops the node and waits for it
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    def kill(self):
        """SIGKILL the node's whole process group, as a crash of its host would."""
        if self.process is None:
            return
        self._remember_processes()
        if self.process.poll() is None:  # the group id is still the node's while its leader is not reaped
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        left = [p for p in self._seen.values() if _alive(p)]
        for process in left:
            try:
                process.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(left, timeout=10)

    def restart(self, *, crash=False) -> RabbitMQNode:
        """Stop the node (gracefully, or SIGKILLed with ``crash``) and start it again."""
        self.kill() if crash else self.stop()
        return self.start()

    def close(self):
        self.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info):
        self.close()

    # --- asking it ------------------------------------------------------------------------------
    def ctl(self, *args, timeout=60) -> str:
        """``rabbitmqctl -n <this node> *args``; its output (fails on a non-zero exit)."""
        done = subprocess.run([script("rabbitmqctl"), "-n", self.nodename, *map(str, args)], env=self._environment(),
                              capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise AssertionError(f"rabbitmqctl {' '.join(map(str, args))} exited {done.returncode}:\n"
                                 f"{done.stdout}{done.stderr}")
        return done.stdout

    def queues(self) -> dict[str, dict]:
        """Every queue of the node: name -> {"type", "durable", "messages"} (ready and unacked)."""
        out = self.ctl("list_queues", "--quiet", "--no-table-headers", "name", "type", "durable", "messages")
        found = {}
        for line in out.splitlines():
            parts = line.split("\t")
            if len(parts) == 4:
                name, kind, durable, messages = parts
                found[name] = {"type": kind, "durable": durable == "true", "messages": int(messages)}
        return found

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    # --- internals --------------------------------------------------------------------------------
    def _environment(self) -> dict:
        """The variables that keep the node, and ``rabbitmqctl`` talking to it, to its own
        directory and ports; the machine's ``rabbitmq-env.conf`` is not read."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        env.update({
            "HOME": str(self.workdir),  # its Erlang cookie, shared with rabbitmqctl
            "RABBITMQ_CONF_ENV_FILE": str(self.workdir / "rabbitmq-env.conf"),
            "RABBITMQ_NODENAME": self.nodename,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.workdir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.workdir / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.workdir / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(self.workdir / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.workdir / "enabled_plugins"),
            # Erlang distribution on loopback only.
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        })
        return env

    def _write_configuration(self):
        (self.workdir / "rabbitmq-env.conf").write_text("")
        (self.workdir / "enabled_plugins").write_text("[].\n")
        conf = []
        rabbit = []
        if self.consumer_timeout_ms is not None:
            conf.append(f"consumer_timeout = {int(self.consumer_timeout_ms)}")
            rabbit.append(f"{{channel_tick_interval, {TICK_MS}}}")
        (self.workdir / "rabbitmq.conf").write_text("\n".join(conf) + "\n")
        (self.workdir / "advanced.config").write_text(f"[{{rabbit, [{', '.join(rabbit)}]}}].\n")

    def _wait_until_it_answers(self):
        deadline = time.monotonic() + START_TIMEOUT
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                output = (self.workdir / f"server.{self.starts}.out").read_text(errors="replace")
                self.kill()
                raise AssertionError(f"RabbitMQ node {self.nodename} did not start on port {self.port}:\n"
                                     f"{output[-4000:]}\n{self.log_text()[-4000:]}")
            time.sleep(0.2)

    def _answers(self) -> bool:
        """The node takes AMQP connections: its listener is up only once it booted."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"AMQP\x00\x00\x09\x01")
                sock.settimeout(5)
                return sock.recv(1)[:1] == b"\x01"  # a Connection.Start frame (a method frame)
        except OSError:
            return False

    def _remember_processes(self):
        """Note the node's processes now (the script, the Erlang VM and its helpers)."""
        try:
            leader = psutil.Process(self.process.pid)
            for process in [leader, *leader.children(recursive=True)]:
                self._seen.setdefault(process.pid, process)
        except psutil.NoSuchProcess:
            pass


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
