"""``manage.py start_execution WORKFLOW [--param k=v ...] [--deployment D] [--idempotency-key KEY] [--wait]
[--json]``, and ``manage.py start_execution --rerun-of ID --from-step NAME [--param k=v ...] ...``"""

import json

from django.core.management.base import CommandError

from workflows_app import services, values
from workflows_app.flow import idempotency
from workflows_app.management.cli import (
    ExecutionCommand,
    call,
    parse_execution_id,
    print_execution,
    wait_and_report,
    wait_seconds,
)
from workflows_app.models import Execution
from workflows_app.parameters import accepts_text_only
from workflows_app.registry import get_workflow


def parse_param(text, schema=None):
    """``k=v``; v is read as JSON when it is JSON (``n=3``, ``flags=[1,2]``), else as a string —
    always as the string when ``schema`` (the workflow's) declares ``k`` a ``str``
    (``version=1.10``)."""
    if "=" not in text:
        raise CommandError(f"--param takes k=v, not {text!r}")
    key, raw = text.split("=", 1)
    if schema is not None and accepts_text_only(schema["properties"].get(key.strip(), {})):
        return key.strip(), raw
    try:
        value = values.loads(raw)
    except json.JSONDecodeError:
        value = raw
    except ValueError as exc:  # JSON, but not a value that can be taken: NaN, too deep
        raise CommandError(f"--param {key.strip()}: {values.clean_text(exc, 200)}") from None
    return key.strip(), value


#: The longest deployment id (the column's: the start refuses a longer one, at every door).
DEPLOYMENT_CHARS = Execution._meta.get_field("deployment_id").max_length


class Command(ExecutionCommand):
    help = ("Start an execution of a registered workflow and print its id (with --json: the execution, as "
            "POST /api/v1/executions answers). --wait follows it to its end, its progress on stderr, and "
            "exits 1 unless it completed. With --rerun-of and --from-step, run an execution again from one of "
            "its steps: its other steps that succeeded keep their results and do not run again.")

    def add_arguments(self, parser):
        parser.add_argument("workflow", nargs="?", default=None, help="a registered workflow (not with --rerun-of)")
        parser.add_argument("--rerun-of", default=None, metavar="ID",
                            help="run this execution (its id, or the start of it) again from --from-step, with its "
                                 "parameters unless --param gives them")
        parser.add_argument("--from-step", default=None, metavar="NAME",
                            help="with --rerun-of: the step run again, with every step that followed from it")
        parser.add_argument("--param", action="append", default=[], metavar="K=V",
                            help="a workflow parameter; V is read as JSON when it is JSON, else as a string "
                                 "(always as the string for a parameter annotated str)")
        parser.add_argument("--deployment", default=None,
                            help=f"its deployment_id (at most {DEPLOYMENT_CHARS} characters): one active execution "
                                 "per deployment, unless --queue or --force")
        parser.add_argument("--queue", action="store_true",
                            help="if the deployment has an active execution, start once it ended (queued)")
        parser.add_argument("--force", action="store_true",
                            help="if the deployment has an active execution, run beside it")
        parser.add_argument("--failure-mode", default=None)
        parser.add_argument("--dry-run", action="store_true")
        parser.add_argument("--idempotency-key", default=None, metavar="KEY",
                            help="start once: the same command again with the same KEY (within "
                                 "WORKFLOWS['IDEMPOTENCY_SECONDS']) prints the execution the first one started "
                                 "instead of starting another; with other arguments it is refused")
        parser.add_argument("--wait", action="store_true",
                            help="follow it to the end, its progress on stderr; exit 1 unless completed")
        parser.add_argument("--timeout", type=wait_seconds, default=None, help="with --wait: give up after this many seconds")
        parser.add_argument("--json", dest="as_json", action="store_true",
                            help="print the execution as the REST API shows it (with --wait: once it ended)")

    def handle(self, *args, workflow, rerun_of, from_step, param, deployment, queue, force, failure_mode, dry_run,
               idempotency_key, wait, timeout, as_json, **options):
        if (workflow is None) == (rerun_of is None):
            raise CommandError("name the workflow to start, or --rerun-of an execution (not both)")
        if (rerun_of is None) != (from_step is None):
            raise CommandError("--rerun-of and --from-step go together")
        options = {"deployment_id": deployment, "failure_mode": failure_mode, "dry_run": dry_run,
                   "created_by": "manage.py", "queue": queue, "force": force, "idempotency_key": idempotency_key}
        try:
            if rerun_of is not None:
                original = parse_execution_id(rerun_of)
                schema = call(get_workflow, Execution.objects.only("workflow_id").get(pk=original).workflow_id).schema
                parameters = dict(parse_param(p, schema) for p in param) if param else None
                execution = call(services.rerun, original, from_step, parameters, **options)
            else:
                schema = call(get_workflow, workflow).schema
                parameters = dict(parse_param(p, schema) for p in param)
                execution = call(services.start, workflow, parameters, **options)
        except idempotency.IdempotencyConflict as refused:
            raise CommandError(" ".join(str(refused).split())) from None  # one line, as every refusal
        if not (wait and as_json):  # with both, stdout holds only the execution once it ended
            print_execution(self, execution, as_json, line=lambda execution: str(execution.pk))
        if execution.idempotent_replay:  # on stderr: stdout is what a start prints, for a script
            self.stderr.write(f"execution {execution.pk} was started earlier with the idempotency key "
                              f"{values.shown_name(idempotency_key)}: nothing was started now")
        if wait:
            wait_and_report(self, execution.pk, as_json, timeout)
