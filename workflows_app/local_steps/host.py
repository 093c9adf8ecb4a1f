"""What the process running a pass tells about itself to the local steps it runs.

A manager's pool process says which run of the manager it is (its incarnation, stored with the
started attempt as an agent's is) and records the attempt as running while it runs, as it
records an operation it runs for the management queue: a starting manager asking the workers what
they run then hears of it, and a kill of the attempt finds its process. The worker runtime
installs that (``agents.worker.pool``); elsewhere (the test harness, a shell) nothing is recorded.
"""

import contextlib
import os

from workflows_app.conf import workflows_settings


class Host:
    """A process that records nothing."""

    def incarnation(self) -> str:
        return ""

    @contextlib.contextmanager
    def running(self, operation_id, attempt):
        yield

    def cancel_requested(self, operation_id, attempt) -> bool:
        """Whether a cancel was broadcast for this attempt to this process' worker."""
        return False


_host = Host()


def install(host):
    global _host
    _host = host


def current() -> Host:
    return _host


def started() -> tuple[dict, dict]:
    """The columns and the event data of a local step's move to ``started`` in this process:
    this run's incarnation, and where it runs (the managers, by their queue's name; this pid)."""
    incarnation = _host.incarnation()
    return ({"incarnation": incarnation},
            {"agent": workflows_settings.MANAGEMENT_QUEUE, "local": True, "incarnation": incarnation, "pid": os.getpid()})
