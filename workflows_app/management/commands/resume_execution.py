"""``manage.py resume_execution ID [--force | --reset-operations] [--wait]``"""

from django.core.management.base import BaseCommand

from workflows_app import services
from workflows_app.management.cli import call_action, wait_until_completed


class Command(BaseCommand):
    help = ("Resume a started (stuck), cancelled or failed execution with a new token: failed, cancelled and "
            "rescheduled operations run again, succeeded ones never do. --force (or --reset-operations) "
            "also resets operations left sending, sent or started (cancelled or failed executions only).")

    def add_arguments(self, parser):
        parser.add_argument("execution_id")
        parser.add_argument("--force", "--reset-operations", dest="force", action="store_true",
                            help="force-resume: reset in-flight operations as well")
        parser.add_argument("--wait", action="store_true", help="follow it to the end; exit 1 unless completed")
        parser.add_argument("--timeout", type=float, default=None, help="with --wait: give up after this many seconds")

    def handle(self, *args, execution_id, force, wait, timeout, **options):
        execution = call_action(services.force_resume if force else services.resume, execution_id)
        self.stdout.write(f"{execution.pk} {execution.status}")
        if wait:
            wait_until_completed(execution.pk, self.stdout, timeout)
