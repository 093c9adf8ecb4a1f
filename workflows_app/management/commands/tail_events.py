"""``manage.py tail_events ID [--follow] [--json] [--tree]``"""

import time

from django.core.management.base import CommandError

from workflows_app.management.cli import (
    ID_HELP,
    INTERRUPTED,
    POLL_SECONDS,
    ExecutionCommand,
    event_json,
    parse_execution_id,
)
from workflows_app.models import Event, Execution
from workflows_app.states import EXECUTION_TERMINAL

#: Events read per query: a long history is printed in pieces, never loaded whole.
BATCH = 500


class Command(ExecutionCommand):
    help = ("Print an execution's events in order; --follow keeps printing until it ends. --json: one event "
            "per line (JSON Lines), each as GET /api/v1/events shows it.")

    def add_arguments(self, parser):
        parser.add_argument("execution_id", metavar="ID", help=ID_HELP)
        parser.add_argument("--follow", action="store_true", help="keep printing new events until the execution ended")
        parser.add_argument("--json", dest="as_json", action="store_true",
                            help="one JSON event per line, as the API shows it")
        parser.add_argument("--tree", action="store_true",
                            help="the events of its children too, and theirs, in one stream (each text line starts "
                                 "with its execution's short id)")

    def handle(self, *args, execution_id, follow, as_json, tree, **options):
        pk = parse_execution_id(execution_id)  # an execution that exists
        line = event_json if as_json else event_text
        if tree and not as_json:
            line = tree_text
        try:
            self.tail(pk, follow, line, tree)
        except KeyboardInterrupt:
            raise CommandError(f"stopped following execution {pk}", returncode=INTERRUPTED) from None

    def tail(self, pk, follow, line, tree=False):
        """Print the events after the last one printed until there are none (with ``follow``:
        none, and the execution has ended — with ``tree``, its descendants end before it). With
        ``tree`` the descendants are looked up again before each read: a child started meanwhile
        is followed from its first event."""
        after = 0
        while True:
            ended = Execution.objects.filter(pk=pk, status__in=EXECUTION_TERMINAL).exists()
            executions = [pk, *descendants(pk)] if tree else [pk]
            batch = list(Event.objects.filter(execution_id__in=executions, id__gt=after).order_by("id")[:BATCH])
            for event in batch:
                self.stdout.write(line(event))
            self.stdout.flush()  # a reader of the pipe (jq, a script) sees each event as it comes
            if batch:
                after = batch[-1].id
            if len(batch) == BATCH:
                continue
            if not follow or ended:
                return
            time.sleep(POLL_SECONDS)


def event_text(event) -> str:
    step = f" [{event.operation}]" if event.operation else ""
    return f"{event.timestamp:%H:%M:%S.%f} {event.type:<20}{step} {event.message}"


def tree_text(event) -> str:
    return f"{str(event.execution_id)[:8]} {event_text(event)}"


def descendants(pk) -> list:
    """The ids of every execution below ``pk`` (one query per level)."""
    found, level = [], [pk]
    while level:
        level = list(Execution.objects.filter(parent_id__in=level).values_list("pk", flat=True))
        found += level
    return found
