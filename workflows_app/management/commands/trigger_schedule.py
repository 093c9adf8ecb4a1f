"""``manage.py trigger_schedule ID [--json]``"""

from django.core.management.base import CommandError

from workflows_app import schedules
from workflows_app.management.cli import ExecutionCommand
from workflows_app.management.schedules import ID_HELP, call, parse_schedule_id, print_action
from workflows_app.states import SlotOutcome


class Command(ExecutionCommand):
    help = ("Start a run of a schedule now (paused or not), under its overlap policy, and print what became of "
            "it: 'started <execution id>', 'buffered' or 'skipped: <why>'. Exits 1 when it was skipped.")

    def add_arguments(self, parser):
        parser.add_argument("schedule_id", metavar="ID", help=ID_HELP)
        parser.add_argument("--json", dest="as_json", action="store_true",
                            help="print the schedule and the slot as POST /api/v1/schedules/{id} answers")

    def handle(self, *args, schedule_id, as_json, **options):
        pk = parse_schedule_id(schedule_id)
        slot = call(schedules.trigger, pk)
        text = slot.outcome + (f" {slot.execution_id}" if slot.execution_id else "") + (
            f": {slot.reason}" if slot.reason else "")
        print_action(self, call(schedules.get, pk), slot, as_json, text)
        if slot.outcome == SlotOutcome.SKIPPED:
            raise CommandError(f"schedule {pk}: the run was skipped" + (f": {slot.reason}" if slot.reason else ""))
