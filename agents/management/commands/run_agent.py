"""``manage.py run_agent NAME [--concurrency N]``: a Celery worker consuming the queue NAME."""

import os
import socket

from celery.signals import worker_ready
from django.core.management.base import BaseCommand, CommandError

import agents.control  # noqa: F401  (registers the kill remote-control command)
from agents.lifecycle import GracefulShutdown, Heartbeat, begin
from switchyard.celery import app
from workflows_app.registry import load_workflow_modules


class Command(BaseCommand):
    help = "Run an agent: a Celery worker on the queue NAME that runs operations sent to NAME."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
        parser.add_argument("--loglevel", default="INFO")

    def handle(self, *args, name, concurrency, loglevel, **options):
        if not name or any(c.isspace() for c in name) or "@" in name:
            raise CommandError(f"invalid agent name {name!r}: no spaces, no '@'")
        if concurrency < 1:
            raise CommandError("--concurrency must be at least 1")
        load_workflow_modules()
        incarnation = begin(name, concurrency=concurrency)
        heartbeat = Heartbeat(name, incarnation)
        # Threads start once the pool has forked, so no pool process inherits their connections.
        worker_ready.connect(lambda **kw: heartbeat.start(), weak=False)
        GracefulShutdown(f"agent {name}").install()
        app.worker_main([
            "worker", "--queues", name, "--hostname", f"{name}@{socket.gethostname()}",
            "--concurrency", str(concurrency), "--loglevel", loglevel,
            "--without-gossip", "--without-mingle", "--task-events",
        ])
