"""``manage.py delete_schedule ID``"""

from workflows_app import schedules
from workflows_app.management.cli import ExecutionCommand
from workflows_app.management.schedules import ID_HELP, call, parse_schedule_id


class Command(ExecutionCommand):
    help = ("Delete a schedule and the record of its slots; the executions it started stay (they no longer name "
            "a schedule).")

    def add_arguments(self, parser):
        parser.add_argument("schedule_id", metavar="ID", help=ID_HELP)

    def handle(self, *args, schedule_id, **options):
        pk = parse_schedule_id(schedule_id)
        call(schedules.delete, pk)
        self.stdout.write(f"deleted schedule {pk}")
