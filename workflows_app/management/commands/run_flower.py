"""``manage.py run_flower``: Celery's own Flower on the project's broker, with its task history
kept on disk in Switchyard's local directory (``--persistent``), so it survives a restart of
Flower. Flower is an optional dependency: ``pip install 'django-switchyard[flower]'``.

Flower shows every task's arguments and can revoke and kill them: it asks for a login.
The credentials are Flower's own setting, read by Flower itself from the environment —
``FLOWER_BASIC_AUTH=user:password`` (several: comma-separated) — so that they never appear on a
command line; without any the command refuses to start, unless told ``--no-auth`` (a proxy in
front asks for a login, or Flower's OAuth is configured)."""

import importlib.util
import os

from celery import current_app
from django.core.management.base import BaseCommand, CommandError

from workflows_app import local_files
from workflows_app.conf import var_dir

#: Flower's own environment variable for its HTTP basic authentication.
BASIC_AUTH_ENV = "FLOWER_BASIC_AUTH"


class Command(BaseCommand):
    help = ("Run Flower (Celery's monitor) for the Switchyard broker, with a persistent history. "
            f"It asks for the login given in {BASIC_AUTH_ENV} (user:password).")

    def add_arguments(self, parser):
        parser.add_argument("--address", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=5555)
        parser.add_argument("--no-auth", action="store_true",
                            help=f"start without {BASIC_AUTH_ENV}: only when something else asks for a login "
                                 "(a proxy in front, Flower's OAuth)")

    def handle(self, *args, address, port, no_auth, **options):
        if importlib.util.find_spec("flower") is None:
            raise CommandError("Flower is not installed: pip install 'django-switchyard[flower]'")
        credentials = os.environ.get(BASIC_AUTH_ENV, "")
        if credentials and not all(_is_credential(c) for c in credentials.split(",")):
            raise CommandError(f"{BASIC_AUTH_ENV} must be user:password (several: comma-separated), "
                               "each with a user and a password")
        if not credentials and not no_auth:
            raise CommandError(f"Flower needs a login: set {BASIC_AUTH_ENV}=user:password "
                               "(or give --no-auth when something in front of it asks for one)")
        directory = local_files.private_dir(var_dir())
        # This process is Flower's alone from here on: its history (a dbm file, made by Python's
        # shelve with the umask) is kept for its owner only. Put back when Flower returns.
        previous_umask = os.umask(local_files.PRIVATE_UMASK)
        try:
            current_app.start(argv=[
                "flower",
                f"--address={address}",
                f"--port={port}",
                "--persistent=True",
                f"--db={directory / 'flower.db'}",
                "--state_save_interval=10000",
            ])
        finally:
            os.umask(previous_umask)


def _is_credential(text) -> bool:
    user, colon, password = text.partition(":")
    return bool(user.strip() and colon and password)
