"""``manage.py cancel_execution ID [--force | --kill]``"""

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from workflows_app import services
from workflows_app.errors import ActionRefused
from workflows_app.models import Execution


class Command(BaseCommand):
    help = ("Cancel an execution: running operations are asked to stop and awaited. --force ends it at once "
            "without waiting; --kill signals the processes of its operations (SIGTERM, then SIGKILL).")

    def add_arguments(self, parser):
        parser.add_argument("execution_id")
        level = parser.add_mutually_exclusive_group()
        level.add_argument("--force", action="store_true", help="force-cancel: do not wait for running operations")
        level.add_argument("--kill", action="store_true", help="kill the processes of running operations")

    def handle(self, *args, execution_id, force, kill, **options):
        action = services.kill if kill else services.force_cancel if force else services.cancel
        try:
            execution = action(execution_id)
        except (Execution.DoesNotExist, ValidationError, ValueError):
            raise CommandError(f"no execution {execution_id!r}") from None
        except ActionRefused as refused:
            raise CommandError(str(refused)) from None
        self.stdout.write(f"{execution.pk} {execution.status}")
