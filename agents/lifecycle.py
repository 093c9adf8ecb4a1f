"""An agent's (or manager's) life: registering this run, heart-beating, and — when an agent
starts again — declaring lost what its earlier runs left started."""

import logging
import os
import socket
import threading
import uuid

from django.db import close_old_connections, connections
from django.utils import timezone

from agents import local
from agents.models import Agent
from workflows_app.conf import workflows_settings
from workflows_app.engine import progress
from workflows_app.models import Operation
from workflows_app.states import OperationState

logger = logging.getLogger(__name__)


def begin(name, *, register=True, concurrency=None) -> str:
    """Start a run of ``name``: a new incarnation id in this process' environment (inherited
    by its pool processes); for an agent, its row and the clean-up of its earlier runs."""
    incarnation = uuid.uuid4().hex
    os.environ[local.NAME_ENV] = name
    os.environ[local.INCARNATION_ENV] = incarnation
    if register:
        killed = local.kill_leftovers(name)
        if killed:
            logger.warning("killed %d operation process group(s) left by an earlier run of %s: %s", len(killed), name, killed)
        now = timezone.now()
        Agent.objects.update_or_create(name=name, defaults={
            "incarnation": incarnation, "hostname": socket.gethostname(), "pid": os.getpid(),
            "concurrency": concurrency, "started_at": now, "last_heartbeat": now})
        lost = Operation.objects.filter(agent=name, state=OperationState.STARTED).exclude(incarnation=incarnation)
        for operation in lost:
            progress.record_failure(operation, operation.attempt, {
                "type": "WorkerLost", "message": f"lost: agent {name} started again", "traceback": ""}, retryable=True)
    connections.close_all()  # never share a connection with the pool processes about to fork
    return incarnation


class Heartbeat(threading.Thread):
    """Writes ``last_heartbeat`` every AGENT_HEARTBEAT_SECONDS while this run is the current one."""

    def __init__(self, name, incarnation):
        super().__init__(name=f"heartbeat-{name}", daemon=True)
        self.agent, self.incarnation = name, incarnation
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.wait(workflows_settings.AGENT_HEARTBEAT_SECONDS):
            try:
                close_old_connections()
                if not Agent.objects.filter(name=self.agent, incarnation=self.incarnation).update(last_heartbeat=timezone.now()):
                    logger.warning("agent %s: a newer run has taken the name over", self.agent)
            except Exception:
                logger.exception("agent %s: heartbeat failed", self.agent)


class Ticker(threading.Thread):
    """Calls ``fn`` every ``interval`` seconds, logging (not dying of) its errors."""

    def __init__(self, fn, interval, name="tick"):
        super().__init__(name=name, daemon=True)
        self.fn, self.interval = fn, interval
        self.stopped = threading.Event()

    def run(self):
        while not self.stopped.wait(self.interval):
            try:
                close_old_connections()
                self.fn()
            except Exception:
                logger.exception("%s failed", self.name)
