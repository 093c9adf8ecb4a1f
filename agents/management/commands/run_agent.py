"""``manage.py run_agent NAME [--concurrency N]``: a Celery worker consuming the queue NAME."""

import os
import socket

from django.core.management.base import CommandError

from agents.worker.lifecycle import WorkerCommand, begin, heartbeat, run_worker
from workflows_app import values


def check_name(name):
    """A ``CommandError`` unless ``name`` can be an agent's (a queue's) name."""
    problem = values.string_problem(name)
    if problem:
        raise CommandError(f"invalid agent name {values.printable(name)}: {problem}")
    if not name or not name.isprintable() or any(c.isspace() for c in name) or "@" in name or len(name) > 200:
        raise CommandError(f"invalid agent name {name!r}: printable, no spaces, no '@', at most 200 characters")


class Command(WorkerCommand):
    help = "Run an agent: a Celery worker on the queue NAME that runs operations sent to NAME."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
        parser.add_argument("--loglevel", default="INFO")

    def handle(self, *args, name, concurrency, loglevel, **options):
        check_name(name)
        if concurrency < 1:
            raise CommandError("--concurrency must be at least 1")
        begin(name, concurrency=concurrency)
        run_worker(f"agent {name}", queue=name, hostname=f"{name}@{socket.gethostname()}", concurrency=concurrency,
                   loglevel=loglevel, threads=[heartbeat(name)])
