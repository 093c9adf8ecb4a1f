"""``manage.py create_schedule WORKFLOW (--cron EXPR | --interval SECONDS) [--timezone TZ] [--overlap P]
[--catchup-window S] [--jitter S] [--param k=v ... | --parameters JSON] [--paused] [--json]``"""

from workflows_app import schedules
from workflows_app.management.cli import ExecutionCommand
from workflows_app.management.schedules import add_field_options, call, field_options, print_schedule


class Command(ExecutionCommand):
    help = ("Create a schedule that starts executions of a registered workflow on a cron expression or every "
            "so many seconds, and print its id and next run (with --json: the schedule, as POST "
            "/api/v1/schedules answers).")

    def add_arguments(self, parser):
        parser.add_argument("workflow", help="a registered workflow")
        add_field_options(parser, creating=True)
        parser.add_argument("--paused", action="store_true", help="create it paused: nothing runs until resumed")

    def handle(self, *args, workflow, paused, as_json, **options):
        fields = field_options(workflow, options)
        schedule = call(schedules.create, workflow, paused=paused, created_by="manage.py", **fields)
        print_schedule(self, schedule, as_json)
