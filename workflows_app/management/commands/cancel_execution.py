"""``manage.py cancel_execution ID [--force | --kill] [--json]``"""

from workflows_app import services
from workflows_app.management.cli import ID_HELP, ExecutionCommand, call, parse_execution_id, print_execution


class Command(ExecutionCommand):
    help = ("Cancel an execution: running operations are asked to stop and awaited. --force ends it at once "
            "without waiting; --kill signals the processes of its operations (SIGTERM, then SIGKILL).")

    def add_arguments(self, parser):
        parser.add_argument("execution_id", metavar="ID", help=ID_HELP)
        level = parser.add_mutually_exclusive_group()
        level.add_argument("--force", action="store_true", help="force-cancel: do not wait for running operations")
        level.add_argument("--kill", action="store_true", help="kill the processes of running operations")
        parser.add_argument("--json", dest="as_json", action="store_true",
                            help="print the execution as the REST API shows it")

    def handle(self, *args, execution_id, force, kill, as_json, **options):
        action = services.kill if kill else services.force_cancel if force else services.cancel
        print_execution(self, call(action, parse_execution_id(execution_id)), as_json)
