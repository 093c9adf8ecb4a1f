"""``manage.py unpause_workflow WORKFLOW``"""

from workflows_app import services
from workflows_app.management.cli import ExecutionCommand, call


class Command(ExecutionCommand):
    help = "Unpause a workflow paused as a whole: its queued executions start, in the order they were created."

    def add_arguments(self, parser):
        parser.add_argument("workflow_id", metavar="WORKFLOW", help="the workflow's registered name")

    def handle(self, *args, workflow_id, **options):
        started = call(services.unpause_workflow, workflow_id)
        self.stdout.write(f"{workflow_id} unpaused: {started} queued execution(s) started")
