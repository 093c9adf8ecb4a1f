"""``manage.py run_flower``: Celery's own Flower on the project's broker, with its task history
kept on disk under var/ (``--persistent``), so it survives a restart of Flower."""

from django.conf import settings
from django.core.management.base import BaseCommand

from switchyard.celery import app


class Command(BaseCommand):
    help = "Run Flower (Celery's monitor) for the Switchyard broker, with a persistent history."

    def add_arguments(self, parser):
        parser.add_argument("--address", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=5555)

    def handle(self, *args, address, port, **options):
        settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
        app.start(argv=[
            "flower",
            f"--address={address}",
            f"--port={port}",
            "--persistent=True",
            f"--db={settings.VAR_DIR / 'flower.db'}",
            "--state_save_interval=10000",
        ])
