"""``manage.py resume_execution ID [--force | --reset-operations] [--wait] [--json]``"""

from workflows_app import services
from workflows_app.management.cli import (
    ID_HELP,
    ExecutionCommand,
    call,
    parse_execution_id,
    print_execution,
    wait_and_report,
    wait_seconds,
)


class Command(ExecutionCommand):
    help = ("Resume a started (stuck), cancelled or failed execution with a new token: failed, cancelled and "
            "rescheduled operations run again, succeeded ones never do. --force (or --reset-operations) "
            "also resets operations left sending, sent or started (cancelled or failed executions only).")

    def add_arguments(self, parser):
        parser.add_argument("execution_id", metavar="ID", help=ID_HELP)
        parser.add_argument("--force", "--reset-operations", dest="force", action="store_true",
                            help="force-resume: reset in-flight operations as well")
        parser.add_argument("--wait", action="store_true",
                            help="follow it to the end, its progress on stderr; exit 1 unless completed")
        parser.add_argument("--timeout", type=wait_seconds, default=None, help="with --wait: give up after this many seconds")
        parser.add_argument("--json", dest="as_json", action="store_true",
                            help="print the execution as the REST API shows it (with --wait: once it ended)")

    def handle(self, *args, execution_id, force, wait, timeout, as_json, **options):
        service = services.force_resume if force else services.resume
        execution = call(service, parse_execution_id(execution_id))
        if not (wait and as_json):  # with both, stdout holds only the execution once it ended
            print_execution(self, execution, as_json)
        if wait:
            wait_and_report(self, execution.pk, as_json, timeout)
