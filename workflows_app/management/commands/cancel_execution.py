"""``manage.py cancel_execution ID [--force | --kill]``"""

from django.core.management.base import BaseCommand

from workflows_app import services
from workflows_app.management.cli import call_action


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
        execution = call_action(action, execution_id)
        self.stdout.write(f"{execution.pk} {execution.status}")
