"""Run a set of child processes, each in its own process group, and stop them all gracefully.

Used by ``manage.py standalone``: one Ctrl-C (SIGINT) or SIGTERM stops every child with SIGTERM
to its whole process group, then SIGKILL to any still alive after ``grace`` seconds.
"""

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field


@dataclass
class Child:
    name: str
    argv: list
    env: dict = field(default_factory=dict)
    process: subprocess.Popen | None = None


class Supervisor:
    def __init__(self, children, *, cwd=None, grace=10.0, out=sys.stdout, before_stop=None):
        self.children = list(children)
        self.before_stop = before_stop
        self.cwd = cwd
        self.grace = grace
        self.out = out
        self._stopping = False

    def start(self):
        for child in self.children:
            child.process = subprocess.Popen(
                child.argv, cwd=self.cwd, env={**os.environ, **child.env}, start_new_session=True
            )
            self.out.write(f"started {child.name} (pid {child.process.pid}): {' '.join(child.argv[1:])}\n")
        self.out.flush()

    def wait(self):
        """Block until a signal asks to stop or a child exits; then stop everything.
        Returns the exit status: 0 for a requested stop, 1 when a child died by itself."""
        status = 0
        previous = {sig: signal.signal(sig, self._ask_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            while not self._stopping:
                dead = [c for c in self.children if c.process.poll() is not None]
                if dead:
                    for child in dead:
                        self.out.write(f"{child.name} exited with status {child.process.returncode}; stopping the stack\n")
                    status = 1
                    break
                time.sleep(0.2)
        finally:
            if self.before_stop is not None and status == 0:
                self.before_stop()
            self.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return status

    def _ask_stop(self, signum, frame):
        self._stopping = True

    def stop(self):
        alive = [c for c in self.children if c.process and c.process.poll() is None]
        for child in alive:
            _signal_group(child.process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline and any(c.process.poll() is None for c in alive):
            time.sleep(0.1)
        for child in alive:
            if child.process.poll() is None:
                self.out.write(f"{child.name} did not stop within {self.grace:.0f}s: killed\n")
            _signal_group(child.process.pid, signal.SIGKILL)  # leftovers of the group, too
            child.process.wait()
        self.out.write("stopped\n")
        self.out.flush()


def _signal_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
