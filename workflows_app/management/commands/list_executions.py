"""``manage.py list_executions [--status S] [--limit N] [--json]``"""

from django.core.management.base import CommandError

from workflows_app.management.cli import ExecutionCommand, print_executions
from workflows_app.models import Execution
from workflows_app.states import ExecutionStatus


class Command(ExecutionCommand):
    help = "List executions, newest first (with --json: a JSON array, each as GET /api/v1/executions shows it)."

    def add_arguments(self, parser):
        parser.add_argument("--status", default=None, help=f"only this status: {', '.join(ExecutionStatus.values)}")
        parser.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
        parser.add_argument("--json", dest="as_json", action="store_true",
                            help="print a JSON array of executions, as the API")

    def handle(self, *args, status, limit, as_json, **options):
        if status is not None and status not in ExecutionStatus.values:
            raise CommandError(f"--status must be one of {', '.join(ExecutionStatus.values)}, not {status!r}")
        if limit < 1:
            raise CommandError(f"--limit must be at least 1, not {limit}")
        executions = Execution.objects.order_by("-created_at", "id")  # the API's default order
        if status is not None:
            executions = executions.filter(status=status)
        if as_json:
            print_executions(self, executions[:limit])
            return
        for execution in executions[:limit]:
            self.stdout.write(f"{execution.pk}  {execution.status:<16} {execution.workflow_id:<24} "
                              f"{execution.created_at:%Y-%m-%d %H:%M:%S}")
