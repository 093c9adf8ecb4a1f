"""``manage.py update_schedule ID [--cron EXPR | --interval SECONDS] [--timezone TZ] [--overlap P]
[--catchup-window S] [--jitter S] [--param k=v ... | --parameters JSON] [--json]``"""

from django.core.management.base import CommandError

from workflows_app import schedules
from workflows_app.management.cli import ExecutionCommand
from workflows_app.management.schedules import (
    ID_HELP,
    add_field_options,
    call,
    field_options,
    parse_schedule_id,
    print_schedule,
)


class Command(ExecutionCommand):
    help = ("Change a schedule: only the fields given (--cron replaces an interval, --interval a cron "
            "expression; --param or --parameters replace all its parameters). A change of the timing plans "
            "the next run again from now. Pause and resume it with pause_schedule and resume_schedule.")

    def add_arguments(self, parser):
        parser.add_argument("schedule_id", metavar="ID", help=ID_HELP)
        add_field_options(parser, creating=False)

    def handle(self, *args, schedule_id, as_json, **options):
        pk = parse_schedule_id(schedule_id)
        fields = field_options(call(schedules.get, pk).workflow_id, options)
        if not fields:
            raise CommandError("nothing to change: give at least one of --cron, --interval, --timezone, --overlap, "
                               "--catchup-window, --jitter, --param, --parameters")
        print_schedule(self, call(schedules.update, pk, **fields), as_json)
