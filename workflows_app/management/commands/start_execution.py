"""``manage.py start_execution WORKFLOW [--param k=v ...] [--deployment D] [--wait]``"""

import json

from django.core.management.base import BaseCommand, CommandError

from workflows_app import services
from workflows_app.errors import ParameterError, RegistrationError
from workflows_app.management.cli import wait_until_completed


def parse_param(text):
    """``k=v``; v is read as JSON when it is JSON (``n=3``, ``flags=[1,2]``), else as a string."""
    if "=" not in text:
        raise CommandError(f"--param takes k=v, not {text!r}")
    key, raw = text.split("=", 1)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


class Command(BaseCommand):
    help = "Start an execution of a registered workflow."

    def add_arguments(self, parser):
        parser.add_argument("workflow")
        parser.add_argument("--param", action="append", default=[], metavar="K=V")
        parser.add_argument("--deployment", default=None)
        parser.add_argument("--failure-mode", default=None)
        parser.add_argument("--dry-run", action="store_true")
        parser.add_argument("--wait", action="store_true", help="follow it to the end; exit 1 unless completed")
        parser.add_argument("--timeout", type=float, default=None, help="with --wait: give up after this many seconds")

    def handle(self, *args, workflow, param, deployment, failure_mode, dry_run, wait, timeout, **options):
        parameters = dict(parse_param(p) for p in param)
        try:
            execution = services.start(workflow, parameters, deployment_id=deployment, failure_mode=failure_mode,
                                       dry_run=dry_run, created_by="manage.py")
        except (RegistrationError, ParameterError) as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(str(execution.pk))
        if wait:
            wait_until_completed(execution.pk, self.stdout, timeout)

