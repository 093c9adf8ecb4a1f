"""``manage.py purge_executions --older-than DAYS [--status S ...] [--dry-run] [--json]``"""

import math
from datetime import datetime

from django.core.management.base import CommandError
from django.utils import timezone
from tqdm import tqdm

from workflows_app import retention
from workflows_app.management.cli import ExecutionCommand, progress_stream, quoted, render
from workflows_app.states import EXECUTION_TERMINAL

#: The progress line: ``purge: 12000 of 100000 executions looked at |###   | [00:04, deleted 11980]``.
BAR_FORMAT = "{desc}: {n} of {total} executions looked at |{bar}| [{elapsed}{postfix}]"


class Command(ExecutionCommand):
    help = ("Delete the executions that ended more than DAYS days ago, with their operations, events, waits and "
            "child executions, in batches. Never an active execution, nor one with an active ancestor: a child goes "
            "with its top-level execution, once every execution of the tree ended before the cutoff. --dry-run "
            "counts what would go; --json prints the counts as one JSON object.")

    def add_arguments(self, parser):
        parser.add_argument("--older-than", required=True, metavar="DAYS",
                            help="ended more than this many days ago (a number >= 0, no further back than the year 1; "
                                 "0.5 is twelve hours)")
        parser.add_argument("--status", nargs="+", action="extend", default=[], metavar="S",
                            help=f"only these statuses (default: every ended one: {', '.join(sorted(EXECUTION_TERMINAL))})")
        parser.add_argument("--dry-run", action="store_true", help="count what would be deleted, delete nothing")
        parser.add_argument("--json", dest="as_json", action="store_true",
                            help="print the counts as one JSON object: executions, operations, events, kept, dry_run")

    def handle(self, *args, older_than, status, dry_run, as_json, **options):
        now = timezone.now()
        days = parse_days(older_than, now)
        try:
            statuses = retention.terminal_statuses(status)
        except ValueError as exc:
            raise CommandError(f"--status: {exc}") from None
        cutoff = retention.cutoff(days, now)
        bar = Bar(progress_stream(self.stderr), "dry run" if dry_run else "purge")
        try:
            counts = retention.purge(days, statuses, dry_run=dry_run, now=now, progress=bar.show)
        finally:
            bar.close()
        if as_json:
            self.stdout.write(render({**counts.as_dict(), "dry_run": dry_run, "ended_before": cutoff,
                                      "statuses": sorted(statuses)}))
            return
        verb = "would delete" if dry_run else "deleted"
        kept = f"; {counts.kept} left with a tree still active or busy" if counts.kept else ""
        self.stdout.write(f"{verb} {counts.executions} executions, {counts.operations} operations, {counts.events} "
                          f"events (ended before {cutoff:%Y-%m-%d %H:%M:%S %Z}){kept}")


def parse_days(text, now) -> float:
    """``--older-than``: a number of days >= 0 that does not go back before the year 1 from
    ``now`` (no date is earlier); else a one-line CommandError."""
    try:
        days = float(text)
    except ValueError:
        days = None
    if days is None or not math.isfinite(days) or days < 0:
        raise CommandError(f"--older-than takes a number of days >= 0, not {quoted(text)}")
    try:
        retention.cutoff(days, now)
    except OverflowError:
        most = (now - datetime.min.replace(tzinfo=now.tzinfo)).days
        raise CommandError(f"--older-than takes at most {most} days (back to the year 1), not {quoted(text)}") from None
    return days


class Bar:
    """A tqdm bar of the executions looked at, drawn once a purge takes more than one batch."""

    def __init__(self, stream, label):
        self.stream, self.label, self.bar = stream, label, None

    def show(self, counts, examined, total):
        if self.bar is None:
            if examined >= total:
                return  # done in one batch: nothing to show
            self.bar = tqdm(desc=self.label, total=total, file=self.stream, bar_format=BAR_FORMAT, mininterval=0.5,
                            dynamic_ncols=True)
        self.bar.set_postfix_str(f"{'counted' if self.label == 'dry run' else 'deleted'} {counts.executions}",
                                 refresh=False)
        self.bar.update(min(examined, total) - self.bar.n)  # drawn at most every mininterval: short in a log

    def close(self):
        if self.bar is not None:
            self.bar.close()
