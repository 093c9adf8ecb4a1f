"""``manage.py tail_events ID [--follow]``"""

import time
import uuid

from django.core.management.base import BaseCommand, CommandError

from workflows_app.models import Event, Execution
from workflows_app.states import EXECUTION_TERMINAL


class Command(BaseCommand):
    help = "Print an execution's events in order; --follow keeps printing until it ends."

    def add_arguments(self, parser):
        parser.add_argument("execution_id")
        parser.add_argument("--follow", action="store_true")

    def handle(self, *args, execution_id, follow, **options):
        try:
            execution_id = uuid.UUID(execution_id)
        except ValueError:
            raise CommandError(f"{execution_id!r} is not an execution id (a UUID)") from None
        if not Execution.objects.filter(pk=execution_id).exists():
            raise CommandError(f"no execution {execution_id}")
        after = 0
        while True:
            for event in Event.objects.filter(execution_id=execution_id, id__gt=after).order_by("id"):
                after = event.id
                step = f" [{event.operation}]" if event.operation else ""
                self.stdout.write(f"{event.timestamp:%H:%M:%S.%f} {event.type:<20}{step} {event.message}")
            if not follow:
                return
            status = Execution.objects.filter(pk=execution_id).values_list("status", flat=True).get()
            if status in EXECUTION_TERMINAL and not Event.objects.filter(execution_id=execution_id, id__gt=after).exists():
                return
            time.sleep(0.3)
