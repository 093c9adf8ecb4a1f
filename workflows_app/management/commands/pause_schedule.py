"""``manage.py pause_schedule ID [--json]``"""

from workflows_app import schedules
from workflows_app.management.cli import ExecutionCommand
from workflows_app.management.schedules import ID_HELP, call, line, parse_schedule_id, print_action


class Command(ExecutionCommand):
    help = ("Pause a schedule: no run starts until it is resumed; a run already started goes on. Prints "
            "its id and 'paused'.")

    def add_arguments(self, parser):
        parser.add_argument("schedule_id", metavar="ID", help=ID_HELP)
        parser.add_argument("--json", dest="as_json", action="store_true",
                            help="print the schedule as POST /api/v1/schedules/{id} answers")

    def handle(self, *args, schedule_id, as_json, **options):
        schedule = call(schedules.pause, parse_schedule_id(schedule_id))
        print_action(self, schedule, None, as_json, line(schedule))
