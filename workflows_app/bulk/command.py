"""The bulk actions' commands (``cancel_executions``, ``resume_executions``, ``pause_executions``):
the filters of ``list_executions`` (``selection.add_arguments``), ``--all``, ``--dry-run`` and
``--json``; each command names its action, and the options that choose a stronger one
(``cancel_executions --kill``), as its one-execution command does.

What it prints is the outcome (``run.Outcome``): one line, or with ``--json`` one JSON document,
the one ``POST /api/v1/executions/bulk`` answers. It exits 1 when anything was refused or the run
was stopped (the line on stderr says why), 0 otherwise — skipped executions are not a failure:
their status did not ask for the action.
"""

from django.core.management.base import CommandError

from workflows_app import services
from workflows_app.bulk import run, selection
from workflows_app.management.cli import ExecutionCommand, render


class BulkActionCommand(ExecutionCommand):
    """Base of a bulk action's command: ``action``, and ``stronger`` options (``{"kill": ("kill",
    help)}``, mutually exclusive) that take another action instead."""

    action = ""
    stronger = {}

    def add_arguments(self, parser):
        if self.stronger:
            group = parser.add_mutually_exclusive_group()
            for name, (_, text) in self.stronger.items():
                group.add_argument(f"--{name}", dest=f"stronger_{name}", action="store_true", help=text)
        selection.add_arguments(parser)
        parser.add_argument("--all", dest="everything", action="store_true",
                            help="without a filter: every execution (no filter at all is refused otherwise)")
        parser.add_argument("--dry-run", action="store_true",
                            help="count what would be done, skipped and refused; do nothing")
        parser.add_argument("--json", dest="as_json", action="store_true",
                            help="print one JSON document, the counts as POST /api/v1/executions/bulk answers them")

    def handle(self, *args, everything, dry_run, as_json, **options):
        action = next((action for name, (action, _) in self.stronger.items() if options.get(f"stronger_{name}")),
                      self.action)
        if action not in services.ACTIONS:
            raise CommandError(f"there is no action {action!r} here (the actions: {', '.join(services.ACTIONS)})")
        outcome = run.act(action, selection.for_command(options, everything=everything), dry_run=dry_run)
        self.stdout.write(render(outcome.as_dict()) if as_json else outcome.summary())
        if outcome.stopped:
            raise CommandError(outcome.stopped)
        if outcome.refused:
            raise CommandError(f"{action}: {outcome.refused:,} of {outcome.matched:,} refused ({outcome.why()})")
