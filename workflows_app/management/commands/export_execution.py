"""``manage.py export_execution ID [--output FILE]``"""

import json

from django.core.management.base import CommandError

from workflows_app.engine import history
from workflows_app.management.cli import ID_HELP, ExecutionCommand, call, parse_execution_id


class Command(ExecutionCommand):
    help = ("Write an execution's history as JSON — its parameters, steps, waits and patch markers: what a replay "
            "of its workflow needs, nothing secret — for `replay_check` to run today's workflow code against.")

    def add_arguments(self, parser):
        parser.add_argument("execution_id", metavar="ID", help=ID_HELP)
        parser.add_argument("--output", metavar="FILE", default=None,
                            help="write it to FILE (replaced if it exists) instead of stdout")

    def handle(self, *args, execution_id, output, **options):
        document = call(history.export, parse_execution_id(execution_id))
        text = json.dumps(document, indent=2, sort_keys=False, ensure_ascii=False)
        if output is None:
            self.stdout.write(text)
            return
        try:
            with open(output, "w", encoding="utf-8") as file:
                file.write(text + "\n")
        except OSError as exc:
            raise CommandError(f"cannot write {output!r}: {exc.strerror or exc}") from None
        self.stdout.write(f"{document['execution']['id']} {output}")
