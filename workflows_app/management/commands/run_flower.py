"""``manage.py run_flower``: Celery's own Flower on the project's broker, with its task history
kept on disk in Switchyard's local directory (``--persistent``), so it survives a restart of
Flower. Flower is an optional dependency: ``pip install 'switchyard[flower]'``."""

import importlib.util

from celery import current_app
from django.core.management.base import BaseCommand, CommandError

from workflows_app.conf import var_dir


class Command(BaseCommand):
    help = "Run Flower (Celery's monitor) for the Switchyard broker, with a persistent history."

    def add_arguments(self, parser):
        parser.add_argument("--address", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=5555)

    def handle(self, *args, address, port, **options):
        if importlib.util.find_spec("flower") is None:
            raise CommandError("Flower is not installed: pip install 'switchyard[flower]'")
        directory = var_dir()
        directory.mkdir(parents=True, exist_ok=True)
        current_app.start(argv=[
            "flower",
            f"--address={address}",
            f"--port={port}",
            "--persistent=True",
            f"--db={directory / 'flower.db'}",
            "--state_save_interval=10000",
        ])
