"""``manage.py pause_workflow WORKFLOW``"""

from workflows_app import services
from workflows_app.management.cli import ExecutionCommand, call


class Command(ExecutionCommand):
    help = ("Pause a workflow as a whole: its new executions wait queued and its schedules' slots are skipped "
            "until it is unpaused; its running executions go on.")

    def add_arguments(self, parser):
        parser.add_argument("workflow_id", metavar="WORKFLOW", help="the workflow's registered name")

    def handle(self, *args, workflow_id, **options):
        call(services.pause_workflow, workflow_id)
        self.stdout.write(f"{workflow_id} paused")
