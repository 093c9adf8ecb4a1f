"""``manage.py list_executions [--status S] [--limit N]``"""

from django.core.management.base import BaseCommand, CommandError

from workflows_app.models import Execution
from workflows_app.states import ExecutionStatus


class Command(BaseCommand):
    help = "List executions, newest first."

    def add_arguments(self, parser):
        parser.add_argument("--status", default=None)
        parser.add_argument("--limit", type=int, default=50)

    def handle(self, *args, status, limit, **options):
        executions = Execution.objects.order_by("-created_at")
        if status:
            if status not in ExecutionStatus.values:
                raise CommandError(f"--status must be one of {', '.join(ExecutionStatus.values)}, not {status!r}")
            executions = executions.filter(status=status)
        for execution in executions[:limit]:
            self.stdout.write(f"{execution.pk}  {execution.status:<16} {execution.workflow_id:<24} "
                              f"{execution.created_at:%Y-%m-%d %H:%M:%S}")
