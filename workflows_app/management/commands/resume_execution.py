"""``manage.py resume_execution ID [--force | --reset-operations] [--wait]``"""

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from workflows_app import services
from workflows_app.errors import ActionRefused
from workflows_app.management.commands.start_execution import follow
from workflows_app.models import Execution
from workflows_app.states import ExecutionStatus


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
        action = services.force_resume if force else services.resume
        try:
            execution = action(execution_id)
        except (Execution.DoesNotExist, ValidationError, ValueError):
            raise CommandError(f"no execution {execution_id!r}") from None
        except ActionRefused as refused:
            raise CommandError(str(refused)) from None
        self.stdout.write(f"{execution.pk} {execution.status}")
        if wait:
            status = follow(execution.pk, self.stdout, timeout)
            if status != ExecutionStatus.COMPLETED:
                error = Execution.objects.get(pk=execution.pk).error.splitlines()
                raise CommandError(f"execution {execution.pk} ended {status}" + (f": {error[0]}" if error else ""))
