"""``manage.py list_executions [--status S] [--workflow-id W] [--created-before T] ... [--limit N] [--json]``

Its filters are those of ``GET /api/v1/executions``, shared with the bulk actions' commands
(``workflows_app.bulk.selection``)."""

from django.core.management.base import CommandError

from workflows_app.bulk import selection
from workflows_app.management.cli import QUOTED_CHARS, ExecutionCommand, print_executions

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
        selection.add_arguments(parser)
        parser.add_argument("--limit", type=int, default=50,
                            help=f"at most this many (default 50, at most {MAX_LIMIT})")
        parser.add_argument("--json", dest="as_json", action="store_true",
                            help="print a JSON array of executions, as the API")

    def handle(self, *args, limit, as_json, **options):
        executions = selection.for_command(options, everything=True)
        limit = check_limit(limit)
        executions = executions.order_by("-created_at", "id")  # the API's default order
        if as_json:
            print_executions(self, executions[:limit])
            return
        for execution in executions[:limit]:
            self.stdout.write(f"{execution.pk}  {execution.status:<16} {execution.workflow_id:<24} "
                              f"{execution.created_at:%Y-%m-%d %H:%M:%S}")
