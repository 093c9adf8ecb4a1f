"""``manage.py run_agent NAME [--concurrency N] [--key-file PATH]``: a Celery worker consuming the
queue NAME, proving what it says with the agent's key: ``--key-file``'s, else
``SWITCHYARD_AGENT_KEY``'s, else (an agent trusted with the master key) derived from its settings."""

import logging
import os
import socket
from pathlib import Path

from django.core.management.base import CommandError

from workflows_app.broker import shared
from agents.worker.lifecycle import WorkerCommand, begin, heartbeat, run_worker
from workflows_app import values
from workflows_app.wire import keys

logger = logging.getLogger(__name__)


def check_name(name):
    """A ``CommandError`` unless ``name`` can be an agent's (a queue's) name."""
    problem = values.agent_name_problem(name)
    if problem is not None:
        raise CommandError(f"invalid agent name {values.shown_name(name)}: {problem}")


class Command(WorkerCommand):
    help = "Run an agent: a Celery worker on the queue NAME that runs operations sent to NAME."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
        parser.add_argument("--loglevel", default="INFO")
        parser.add_argument("--key-file", type=Path, help="a file that holds the agent's key (manage.py agent_key NAME)")

    def handle(self, *args, name, concurrency, loglevel, key_file=None, **options):
        check_name(name)
        if concurrency < 1:
            raise CommandError("--concurrency must be at least 1")
        use_key(key_file)
        if not os.environ.get(keys.KEY_ENV):
            logger.info("agent %s: no key given (%s or --key-file): derived from the master key in its settings",
                        name, keys.KEY_ENV)
        # Before it registers (a report, to the reports exchange): what it shares with the managers
        # is theirs to declare, and an agent's own RabbitMQ account may not.
        shared.await_declared(name)
        shared.use_passively()
        begin(name, concurrency=concurrency)
        run_worker(f"agent {name}", queue=name, hostname=f"{name}@{socket.gethostname()}", concurrency=concurrency,
                   loglevel=loglevel, threads=[heartbeat(name)])


def use_key(key_file):
    """Put the agent's key (from ``key_file`` if given) where its pool processes find it; a
    ``CommandError`` for a key that cannot be one."""
    if key_file is not None:
        try:
            os.environ[keys.KEY_ENV] = key_file.read_text().strip()
        except OSError as exc:
            raise CommandError(f"--key-file: cannot read {key_file}: {exc.strerror}") from None
        source = f"--key-file {key_file}"
    else:
        source = keys.KEY_ENV
    given = os.environ.get(keys.KEY_ENV)
    if given is not None and not keys.is_key(given):
        os.environ.pop(keys.KEY_ENV)
        raise CommandError(f"{source}: not an agent key ({keys.KEY_CHARS} hexadecimal digits, as manage.py agent_key prints)")
