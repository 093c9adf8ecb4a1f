"""``manage.py tail_events ID [--follow] [--json]``"""

import time

from django.core.management.base import CommandError

from workflows_app.management.cli import INTERRUPTED, POLL_SECONDS, ExecutionCommand, event_json, parse_execution_id
from workflows_app.models import Event, Execution
from workflows_app.states import EXECUTION_TERMINAL

#: Events read per query: a long history is printed in pieces, never loaded whole.
BATCH = 500


class Command(ExecutionCommand):
    help = ("Print an execution's events in order; --follow keeps printing until it ends. --json: one event "
            "per line (JSON Lines), each as GET /api/v1/events shows it.")

    def add_arguments(self, parser):
        parser.add_argument("execution_id")
        parser.add_argument("--follow", action="store_true", help="keep printing new events until the execution ended")
        parser.add_argument("--json", dest="as_json", action="store_true",
                            help="one JSON event per line, as the API shows it")

    def handle(self, *args, execution_id, follow, as_json, **options):
        pk = parse_execution_id(execution_id)
        if not Execution.objects.filter(pk=pk).exists():
            raise CommandError(f"no execution '{pk}'")
        line = event_json if as_json else event_text
        try:
            self.tail(pk, follow, line)
        except KeyboardInterrupt:
            raise CommandError(f"stopped following execution {pk}", returncode=INTERRUPTED) from None

    def tail(self, pk, follow, line):
        """Print the events after the last one printed until there are none (with ``follow``:
        none, and the execution has ended)."""
        after = 0
        while True:
            ended = Execution.objects.filter(pk=pk, status__in=EXECUTION_TERMINAL).exists()
            batch = list(Event.objects.filter(execution_id=pk, id__gt=after).order_by("id")[:BATCH])
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
