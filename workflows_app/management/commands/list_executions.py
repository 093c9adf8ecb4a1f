"""``manage.py list_executions [--status S] [--limit N] [--json]``"""

from django.core.management.base import CommandError

from workflows_app.management.cli import QUOTED_CHARS, ExecutionCommand, print_executions
from workflows_app.models import Execution
from workflows_app.states import ExecutionStatus

#: The most ``--limit`` takes: what is listed is held in memory at once (with ``--json``, as one array).
MAX_LIMIT = 10_000


def check_limit(limit, maximum=MAX_LIMIT) -> int:
    """``limit`` if it is from 1 to ``maximum``; else a one-line CommandError stating that range."""
    if not 1 <= limit <= maximum:
        shown = str(limit) if len(str(limit)) <= QUOTED_CHARS else str(limit)[:QUOTED_CHARS] + "…"
        raise CommandError(f"--limit must be from 1 to {maximum}, not {shown}")
    return limit


class Command(ExecutionCommand):
    help = "List executions, newest first (with --json: a JSON array, each as GET /api/v1/executions shows it)."

    def add_arguments(self, parser):
        parser.add_argument("--status", default=None, help=f"only this status: {', '.join(ExecutionStatus.values)}")
        parser.add_argument("--limit", type=int, default=50,
                            help=f"at most this many (default 50, at most {MAX_LIMIT})")
        parser.add_argument("--json", dest="as_json", action="store_true",
                            help="print a JSON array of executions, as the API")

    def handle(self, *args, status, limit, as_json, **options):
        if status is not None and status not in ExecutionStatus.values:
            raise CommandError(f"--status must be one of {', '.join(ExecutionStatus.values)}, not {status!r}")
        limit = check_limit(limit)
        executions = Execution.objects.order_by("-created_at", "id")  # the API's default order
        if status is not None:
            executions = executions.filter(status=status)
        if as_json:
            print_executions(self, executions[:limit])
            return
        for execution in executions[:limit]:
            self.stdout.write(f"{execution.pk}  {execution.status:<16} {execution.workflow_id:<24} "
                              f"{execution.created_at:%Y-%m-%d %H:%M:%S}")
