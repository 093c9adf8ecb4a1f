"""``manage.py send_event ID NAME [--payload JSON]``"""

import json

from django.core.management.base import BaseCommand, CommandError

from workflows_app import services
from workflows_app.errors import ParameterError
from workflows_app.management.cli import call_action


class Command(BaseCommand):
    help = ("Deliver an external event to an execution (what POST /api/v1/executions/ID/events does): "
            "the oldest ctx.await_event(NAME) not yet served takes its payload.")

    def add_arguments(self, parser):
        parser.add_argument("execution_id")
        parser.add_argument("name", help="the event name the workflow waits for")
        parser.add_argument("--payload", default="null", help="a JSON value (default: null)")

    def handle(self, *args, execution_id, name, payload, **options):
        try:
            value = json.loads(payload)
        except ValueError as exc:
            raise CommandError(f"--payload is not JSON: {exc}") from None
        try:
            event = call_action(lambda pk: services.send_event(pk, name, value), execution_id)
        except ParameterError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"{execution_id} event #{event.pk} {name}")
