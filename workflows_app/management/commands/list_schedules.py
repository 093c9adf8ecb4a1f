"""``manage.py list_schedules [--workflow W] [--paused | --active] [--limit N] [--json]``"""

from workflows_app import schedules
from workflows_app.management.cli import ExecutionCommand
from workflows_app.management.commands.list_executions import MAX_LIMIT, check_limit
from workflows_app.management.schedules import moment, print_schedules, timing

#: The columns of the table, with their widths.
HEADER = f"{'ID':<36}  {'WORKFLOW':<24} {'TIMING':<20} {'TIMEZONE':<16} {'OVERLAP':<12} {'STATE':<6}  " \
         f"{'NEXT RUN':<20} {'LAST RUN':<20}"


class Command(ExecutionCommand):
    help = ("List schedules, newest first: id, workflow, cron expression or interval, time zone, overlap policy, "
            "paused or active, next and last run (UTC). With --json: a JSON array, each as GET /api/v1/schedules "
            "shows it.")

    def add_arguments(self, parser):
        parser.add_argument("--workflow", default=None, help="only the schedules of this workflow")
        state = parser.add_mutually_exclusive_group()
        state.add_argument("--paused", dest="paused", action="store_const", const=True, default=None,
                           help="only the paused schedules")
        state.add_argument("--active", dest="paused", action="store_const", const=False,
                           help="only the schedules that are not paused")
        parser.add_argument("--limit", type=int, default=100,
                            help=f"at most this many (default 100, at most {MAX_LIMIT})")
        parser.add_argument("--json", dest="as_json", action="store_true",
                            help="print a JSON array of schedules, as the API")

    def handle(self, *args, workflow, paused, limit, as_json, **options):
        limit = check_limit(limit)
        found = schedules.visible(None).defer("parameters").order_by("-created_at", "id")  # the API's order
        if workflow is not None:
            found = found.filter(workflow_id=workflow)
        if paused is not None:
            found = found.filter(paused=paused)
        found = list(found[:limit])
        if as_json:
            print_schedules(self, found)
            return
        self.stdout.write(HEADER)
        for schedule in found:
            self.stdout.write(f"{schedule.pk}  {schedule.workflow_id:<24} {timing(schedule):<20} "
                              f"{schedule.timezone:<16} {schedule.overlap:<12} "
                              f"{'paused' if schedule.paused else 'active':<6}  "
                              f"{moment(schedule.next_run_at):<20} {moment(schedule.last_run_at):<20}")
