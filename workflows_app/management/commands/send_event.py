"""``manage.py send_event ID NAME [--payload JSON] [--json]``"""

from django.core.management.base import CommandError

from workflows_app import services, values
from workflows_app.management.cli import ID_HELP, ExecutionCommand, call, event_json, parse_execution_id


class Command(ExecutionCommand):
    help = ("Deliver an external event to an execution (what POST /api/v1/executions/ID/events does): "
            "the oldest ctx.await_event(NAME) not yet served takes its payload.")

    def add_arguments(self, parser):
        parser.add_argument("execution_id", metavar="ID", help=ID_HELP)
        parser.add_argument("name", help="the event name the workflow waits for")
        parser.add_argument("--payload", default="null", help="a JSON value (default: null)")
        parser.add_argument("--json", dest="as_json", action="store_true",
                            help="print the stored event as the API answers it")

    def handle(self, *args, execution_id, name, payload, as_json, **options):
        try:
            value = values.loads(payload)
        except ValueError as exc:
            raise CommandError(f"--payload is not JSON: {values.clean_text(exc, 200)}") from None
        event = call(services.send_event, parse_execution_id(execution_id), name, value)
        self.stdout.write(event_json(event) if as_json else f"{event.execution_id} event #{event.pk} {name}")
