"""``manage.py run_manager``: a Celery worker on the management queue that runs dispatchers
(and operations that name no agent), plus the tick that keeps every stored deadline."""

import socket
import uuid

from celery.signals import worker_ready
from django.core.management.base import BaseCommand

import agents.control  # noqa: F401  (registers the kill remote-control command)
from agents.lifecycle import GracefulShutdown, Ticker, begin
from switchyard.celery import app
from workflows_app.conf import workflows_settings
from workflows_app.engine import recovery
from workflows_app.engine.timers import tick
from workflows_app.registry import load_workflow_modules

TICK_SECONDS = 0.5


class Command(BaseCommand):
    help = "Run a manager: dispatchers of executions and operations with no agent."

    def add_arguments(self, parser):
        parser.add_argument("--concurrency", type=int, default=None)
        parser.add_argument("--loglevel", default="INFO")

    def handle(self, *args, concurrency, loglevel, **options):
        load_workflow_modules()
        queue = workflows_settings.MANAGEMENT_QUEUE
        # Any manager carries on every execution: nothing belongs to one process (SPEC §9).
        recovery.on_manager_start()
        incarnation = begin(queue, register=False)
        ticker = Ticker(tick, TICK_SECONDS)
        # Threads start once the pool has forked, so no pool process inherits their connections.
        worker_ready.connect(lambda **kw: ticker.start(), weak=False)
        GracefulShutdown(f"manager {incarnation[:8]}", stop_first=[ticker]).install()
        argv = ["worker", "--queues", queue, "--hostname", f"manager-{uuid.uuid4().hex[:8]}@{socket.gethostname()}",
                "--loglevel", loglevel, "--without-gossip", "--without-mingle", "--task-events"]
        if concurrency:
            argv += ["--concurrency", str(concurrency)]
        app.worker_main(argv)
