"""What the commands on schedules share: naming a schedule by its id or the start of it, one
call to the service with its refusals as one line, the options of a schedule's fields, and
printing a schedule as the REST API shows it.

The commands act with the server's own access (``user=None``), as every ``manage.py`` command.
"""

import uuid

from django.core.management.base import CommandError

from workflows_app import schedules, values
from workflows_app.api.schedule_serializers import ScheduleSerializer, action_result, schedule_detail
from workflows_app.management.cli import ID_PREFIX_MIN, ID_PREFIX_SHOWN, REFUSALS, id_digits, render, the_one
from workflows_app.management.commands.start_execution import parse_param
from workflows_app.models import Schedule
from workflows_app.registry import get_workflow
from workflows_app.states import OverlapPolicy

ID_HELP = f"the schedule's id, or its first {ID_PREFIX_MIN} or more digits when no other id starts with them"


def parse_schedule_id(text) -> uuid.UUID:
    """The id of the schedule a user named by its id or by the start of it (with or without
    dashes): a prefix must name one schedule alone."""
    matches, count = schedules.by_id_prefix(id_digits(text, "schedule"), ID_PREFIX_SHOWN)
    return the_one(text, "schedule", matches, count, lambda row: row["workflow_id"])


def call(service, *args, **kwargs):
    """``service(*args, **kwargs)``: a schedule that is gone or a refusal is a one-line CommandError."""
    try:
        return service(*args, **kwargs)
    except Schedule.DoesNotExist:
        raise CommandError(f"no schedule '{args[0]}'") from None
    except REFUSALS as refused:
        raise CommandError(" ".join(str(refused).split())) from None


# --- a schedule's fields as options ------------------------------------------------------------

def add_field_options(parser, *, creating):
    """The options of a schedule's fields; without ``creating`` (an update) none has a default,
    so that only those given change."""
    default = (lambda value: value) if creating else (lambda value: None)
    timing = parser.add_mutually_exclusive_group(required=creating)
    timing.add_argument("--cron", default=None, metavar="EXPR",
                        help='a cron expression, 5 fields (minute hour day-of-month month day-of-week): "0 3 * * 1-5"')
    timing.add_argument("--interval", type=int, default=None, metavar="SECONDS", help="seconds between two runs")
    parser.add_argument("--timezone", default=default("UTC"), help="the IANA time zone of --cron (default UTC)")
    parser.add_argument("--overlap", default=default(OverlapPolicy.SKIP.value), choices=OverlapPolicy.values,
                        help="what a slot does while the previous run is active (default skip)")
    parser.add_argument("--catchup-window", type=int, default=default(0), metavar="SECONDS",
                        help="how late a slot missed while no manager ran may still start (default 0)")
    parser.add_argument("--jitter", type=int, default=default(0), metavar="SECONDS",
                        help="delay each start by a random time up to this (default 0)")
    given = parser.add_mutually_exclusive_group()
    given.add_argument("--param", action="append", default=[], metavar="K=V",
                       help="a workflow parameter; V is read as JSON when it is JSON, else as a string "
                            "(always as the string for a parameter annotated str)")
    given.add_argument("--parameters", default=None, metavar="JSON", help="the parameters as one JSON object")
    parser.add_argument("--json", dest="as_json", action="store_true",
                        help="print the schedule as the REST API shows it")


def field_options(workflow_id, options) -> dict:
    """The service's keyword arguments the options give (for an update, only those given)."""
    fields = {name: options[name] for name in ("cron", "interval", "timezone", "overlap", "catchup_window", "jitter")
              if options[name] is not None}
    if options["parameters"] is not None:
        try:
            fields["parameters"] = values.loads(options["parameters"])
        except ValueError as exc:
            raise CommandError(f"--parameters: not JSON: {values.clean_text(exc, 200)}") from None
    elif options["param"]:
        schema = call(get_workflow, workflow_id).schema
        fields["parameters"] = dict(parse_param(text, schema) for text in options["param"])
    return fields


# --- printing -------------------------------------------------------------------------------------

def print_schedule(command, schedule, as_json):
    """The schedule as ``GET /schedules/{id}`` answers it, or one line: its id, and its next run or ``paused``."""
    command.stdout.write(render(schedule_detail(schedule)) if as_json else line(schedule))


def print_action(command, schedule, triggered, as_json, text):
    """An action's answer as ``POST /schedules/{id}`` gives it, or the line ``text``."""
    command.stdout.write(render(action_result(schedule, triggered)) if as_json else text)


def print_schedules(command, found):
    """One JSON array of schedules, each as the items of ``GET /schedules``."""
    command.stdout.write(render(ScheduleSerializer(found, many=True).data))


def timing(schedule) -> str:
    return schedule.cron if schedule.cron else f"every {schedule.interval}s"


def line(schedule) -> str:
    when = "paused" if schedule.paused else f"next {moment(schedule.next_run_at)}"
    return f"{schedule.pk} {when}"


def moment(value) -> str:
    return f"{value:%Y-%m-%d %H:%M:%S}Z" if value is not None else "-"
