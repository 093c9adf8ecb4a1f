"""``manage.py run_agent NAME [--concurrency N]``: a Celery worker consuming the queue NAME."""

import os
import socket

from django.core.management.base import BaseCommand, CommandError

from agents.worker.lifecycle import begin, heartbeat, run_worker
from workflows_app import values
from workflows_app.errors import RegistrationError
from workflows_app.registry import require_workflow_modules


def check_name(name):
    """A ``CommandError`` unless ``name`` can be an agent's (a queue's) name."""
    problem = values.string_problem(name)
    if problem:
        raise CommandError(f"invalid agent name {values.printable(name)}: {problem}")
    if not name or not name.isprintable() or any(c.isspace() for c in name) or "@" in name or len(name) > 200:
        raise CommandError(f"invalid agent name {name!r}: printable, no spaces, no '@', at most 200 characters")


class Command(BaseCommand):
    help = "Run an agent: a Celery worker on the queue NAME that runs operations sent to NAME."

    def execute(self, *args, **options):
        # Before the system checks (whose report of the same problem takes five lines), and with
        # --skip-checks too: this process must not run without its workflows and operations.
        try:
            require_workflow_modules()
        except RegistrationError as exc:
            raise CommandError(str(exc)) from None
        return super().execute(*args, **options)

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
