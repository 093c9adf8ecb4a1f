"""``manage.py start_execution WORKFLOW [--param k=v ...] [--deployment D] [--wait]``"""

import json
import sys
import time

from django.core.management.base import BaseCommand, CommandError

from workflows_app import services
from workflows_app.errors import ParameterError, RegistrationError
from workflows_app.models import Execution, Operation
from workflows_app.states import EXECUTION_TERMINAL, ExecutionStatus


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
            status = follow(execution.pk, self.stdout, timeout)
            if status != ExecutionStatus.COMPLETED:
                error = Execution.objects.get(pk=execution.pk).error.splitlines()
                raise CommandError(f"execution {execution.pk} ended {status}" + (f": {error[0]}" if error else ""))


def follow(execution_id, out, timeout=None):
    """Print each change of status and operation counts until the execution is terminal."""
    last = None
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        status = Execution.objects.filter(pk=execution_id).values_list("status", flat=True).get()
        counts = {}
        for state in Operation.objects.filter(execution_id=execution_id).values_list("state", flat=True):
            counts[state] = counts.get(state, 0) + 1
        line = f"{status}  " + " ".join(f"{k}={v}" for k, v in sorted(counts.items()))
        if line != last:
            out.write(line)
            sys.stdout.flush()
            last = line
        if status in EXECUTION_TERMINAL:
            return ExecutionStatus(status)
        if deadline is not None and time.monotonic() > deadline:
            raise CommandError(f"execution {execution_id} is still {status} after {timeout}s")
        time.sleep(0.3)
