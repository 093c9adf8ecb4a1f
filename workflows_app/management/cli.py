"""What the commands scripts call share: one-line errors, the REST API's JSON, and
following an execution to its end with a progress bar.

Each command is a thin entry point: it parses its arguments, calls one service through
:func:`call` — the one place where a refusal becomes a one-line ``CommandError`` — and prints
through :func:`print_execution`, :func:`print_executions` or :func:`event_json`. Those render
with the REST API's own serializers and renderer, so ``--json`` gives a script byte for byte
what ``GET /api/v1/...`` answers, and a field added to the API appears in the commands too.
"""

import argparse
import os
import re
import signal
import sys
import time
import uuid

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from workflows_app import queries, services
from workflows_app.api.renderers import JSONRenderer
from workflows_app.api.serializers import EventSerializer, ExecutionListItemSerializer, execution_detail
from workflows_app.errors import ExistingRunningExecution, ParameterError, RegistrationError, TransitionRefused
from workflows_app.models import Execution
from workflows_app.states import EXECUTION_TERMINAL, OPERATION_TERMINAL, ExecutionStatus, OperationState

#: What the services refuse with; each says why in one line (``str(error)``).
REFUSALS = (TransitionRefused, RegistrationError, ParameterError, ExistingRunningExecution)
#: Seconds between two looks at a followed execution.
POLL_SECONDS = 0.3
#: The exit status of a program stopped by Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED = 130
#: The progress line: ``started: 2 of 5 operations done |####      | [00:03, succeeded=2, started=1]``.
BAR_FORMAT = "{desc}: {n} of {total} operations done |{bar}| [{elapsed}{postfix}]"
#: The fewest hex digits of an id a command takes for the execution: 4 digits leave 65536 ranges,
#: enough to tell apart the few executions an operator has in hand; fewer would name many.
ID_PREFIX_MIN = 4
#: How many executions a refused ambiguous prefix names (then "and N more").
ID_PREFIX_SHOWN = 3
#: The help of every command's execution id.
ID_HELP = f"the execution's id, or its first {ID_PREFIX_MIN} or more digits when no other id starts with them"
#: Hex digits, with or without the dashes of a UUID's text.
ID_TEXT = re.compile(r"[0-9a-f-]+")
#: How much of an argument that names no execution is quoted back.
QUOTED_CHARS = 60


def quoted(text) -> str:
    """``text`` as typed, quoted back in an error: its first QUOTED_CHARS characters, escaped."""
    return repr(text) if len(text) <= QUOTED_CHARS else repr(text[:QUOTED_CHARS]) + "…"


# --- arguments and errors ------------------------------------------------------------------

class OneLineErrorParser(CommandParser):
    """argparse prints its usage above an error, and Django's usage of a command lists every base
    option (``--settings``, ``--traceback``...), several lines in all; these commands answer
    bad input with a one-line reason, as they answer every other error."""

    def error(self, message):
        if self.called_from_command_line:
            self.exit(2, f"{self.prog}: error: {message} (see --help)\n")
        super().error(message)  # call_command: Django's CommandError


class ExecutionCommand(BaseCommand):
    """Base of the commands on executions: a bad argument is one line on stderr too, and a reader
    of stdout that goes away (``| head``) ends the command quietly, as it ends ``cat``."""

    def create_parser(self, prog_name, subcommand, **kwargs):
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        # Django builds the parser itself and has no hook for its class: give it ours.
        parser.__class__ = OneLineErrorParser
        return parser

    def run_from_argv(self, argv):
        try:
            super().run_from_argv(argv)
        except BrokenPipeError:
            # What Python's documentation advises: stdout to /dev/null, so that the flush at
            # exit does not fail again with a traceback; the status of a process killed by SIGPIPE.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(128 + signal.SIGPIPE)


def wait_seconds(text) -> float:
    """A ``--timeout`` of ``--wait``: a number of seconds above 0 (argparse's ``type``: anything else
    is a one-line error). ``nan`` or ``inf`` would never time out."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of seconds, not {quoted(text)}") from None
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"a number of seconds above 0, not {quoted(text)}")
    return seconds


def parse_execution_id(text) -> uuid.UUID:
    """The id of the execution a user named by its id or by the start of it (``770b968c``, as
    the lists and the admin show ids; with or without dashes): a prefix must name one execution
    alone. One query (:func:`queries.executions_by_id_prefix`); whatever else is one line."""
    matches, count = queries.executions_by_id_prefix(id_digits(text), ID_PREFIX_SHOWN)
    return the_one(text, "execution", matches, count, lambda row: f"{row['workflow_id']}, {row['status']}")


def the_one(text, kind, matches, count, describe):
    """The id of the one ``kind`` whose id starts with what the user typed (``text``): ``matches``
    (the first rows, ``{"id", ...}``) of ``count`` in all; none or several is a one-line
    CommandError naming them (``describe(row)``: what each is)."""
    if count == 0:
        raise CommandError(f"no {kind} {quoted(text)}")
    if count > 1:
        named = ", ".join(f"{row['id']} ({describe(row)})" for row in matches)
        more = f" and {count - len(matches)} more" if count > len(matches) else ""
        raise CommandError(f"{quoted(text)} is the start of {count} {kind} ids: {named}{more}; give more of it")
    return matches[0]["id"]


def id_digits(text, kind="execution") -> str:
    """The hex digits of an id or of its start, as typed: a whole UUID in any form Python reads
    (braces, ``urn:uuid:``, capitals), else its first digits, with dashes only where the id's
    text has them. ``kind``: what the id names, for the refusals."""
    try:
        return uuid.UUID(text).hex
    except ValueError:
        pass
    typed = text.lower()
    digits = typed.replace("-", "")
    if not ID_TEXT.fullmatch(typed) or len(digits) > 32 or (
            "-" in typed and not str(uuid.UUID(hex=digits.ljust(32, "0"))).startswith(typed)):
        raise CommandError(f"no {kind} {quoted(text)}: {'an' if kind[0] in 'aeiou' else 'a'} {kind} id is hex digits, "
                           "with or without its dashes")
    if len(digits) < ID_PREFIX_MIN:
        raise CommandError(f"no {kind} {quoted(text)}: give at least {ID_PREFIX_MIN} digits of its id")
    return digits


def call(service, *args, **kwargs):
    """``service(*args, **kwargs)``: an unknown execution or a refusal is a one-line CommandError.

    The first argument of a service on one execution is its id, which names the one missing."""
    try:
        return service(*args, **kwargs)
    except Execution.DoesNotExist:
        raise CommandError(f"no execution '{args[0]}'") from None
    except REFUSALS as refused:
        raise CommandError(" ".join(str(refused).split())) from None  # one line, whatever the message


class ActionCommand(ExecutionCommand):
    """``manage.py <command> ID [--json]``: the action ``action`` (``services.ACTIONS``) on one
    execution; prints its id and status after it (the API's document with ``--json``)."""

    action = None

    def add_arguments(self, parser):
        parser.add_argument("execution_id", metavar="ID", help=ID_HELP)
        parser.add_argument("--json", dest="as_json", action="store_true",
                            help="print the execution as the REST API shows it")

    def handle(self, *args, execution_id, as_json, **options):
        print_execution(self, call(services.ACTIONS[self.action], parse_execution_id(execution_id)), as_json)


# --- the API's JSON --------------------------------------------------------------------------

def render(data) -> str:
    """``data`` as the API's renderer writes it (compact, UTF-8, its dates and UUIDs)."""
    return JSONRenderer().render(data).decode()


def execution_document(pk) -> dict:
    """The execution as ``GET /executions/{id}`` (and every action) answers it."""
    return execution_detail(Execution.objects.get(pk=pk))


def id_and_status(execution) -> str:
    """The line the commands print without ``--json``: ``<id> <status>``."""
    return f"{execution.pk} {execution.status}"


def print_execution(command, execution, as_json, line=id_and_status):
    """Print the execution a service returned: with ``as_json`` as the API answers the same
    request — read again, with its ``operations_summary`` —, else ``line(execution)``: what
    the service left it in."""
    command.stdout.write(render(execution_document(execution.pk)) if as_json else line(execution))
    command.stdout.flush()  # before the progress a wait draws on stderr, when stdout is a pipe


def print_executions(command, executions):
    """One JSON array of executions, each as the items of ``GET /executions`` (without parameters
    and payload) — not the API's page (``count/next/previous``): a command has no next page to link
    to, and ``--limit`` already bounds what it prints."""
    command.stdout.write(render(ExecutionListItemSerializer(executions, many=True).data))


def event_json(event) -> str:
    """One event as ``GET /events`` shows it, on one line (JSON Lines)."""
    return render(EventSerializer(event).data)


# --- following an execution ------------------------------------------------------------------

def wait_and_report(command, pk, as_json, timeout=None):
    """Show the execution's progress on stderr until it ends, then print it on stdout (the API's
    JSON, or a line beginning with its status); a CommandError unless it completed.

    Past ``timeout`` s it prints the execution as it is then, and fails; Ctrl-C fails at once,
    printing nothing more on stdout. Either way only the wait stops: the execution goes on."""
    status = follow(pk, progress_stream(command.stderr), timeout)
    document = execution_document(pk)
    command.stdout.write(render(document) if as_json else final_line(document))
    if status not in EXECUTION_TERMINAL:
        raise CommandError(f"execution {pk} is still {status} after {timeout:g}s")
    if document["status"] != ExecutionStatus.COMPLETED:
        raise CommandError(ended(pk, document["status"], document["error"]))


def ended(pk, status, error) -> str:
    """Why a wait failed: ``execution X ended failed: <error>`` when the error is one line; else
    ``execution X ended failed:`` and the whole error below it, each line indented — a workflow
    that raised stored its traceback, whose last line is the exception's type and message."""
    lines = [line.rstrip() for line in error.strip("\n").splitlines()]
    if len(lines) <= 1:
        return f"execution {pk} ended {status}" + (f": {lines[0].strip()}" if lines and lines[0].strip() else "")
    return f"execution {pk} ended {status}:\n" + "\n".join(f"  {line}" if line else "" for line in lines)


def follow(pk, stream, timeout=None) -> ExecutionStatus:
    """Show the execution's status and its operations, done of total and per state, as a tqdm bar
    on ``stream`` until it is terminal or ``timeout`` s passed; returns the last status seen.
    Each look is two queries, the counts one aggregate, however many operations there are; while
    steps are sent and not started, also its :func:`queries.warnings` (two more), each shown
    once on a line of its own above the bar."""
    deadline = None if timeout is None else time.monotonic() + timeout
    status = None
    progress = Progress(stream)
    try:
        while True:
            status = ExecutionStatus(Execution.objects.filter(pk=pk).values_list("status", flat=True).get())
            summary = queries.operations_summary(pk)
            progress.show(status, summary)
            if status not in EXECUTION_TERMINAL and (summary[OperationState.SENDING] or summary[OperationState.SENT]):
                progress.warn(queries.warnings(pk))
            if status in EXECUTION_TERMINAL or (deadline is not None and time.monotonic() > deadline):
                return status
            time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        still = f": it is still {status}" if status else ""
        raise CommandError(f"stopped waiting for execution {pk}{still}", returncode=INTERRUPTED) from None
    finally:
        progress.close()


class Progress:
    """The tqdm bar of :func:`follow`, drawn again when something changed (every look on a
    terminal, so that its clock runs; only on a change in a log, which keeps it short)."""

    def __init__(self, stream):
        self.stream, self.bar, self.last = stream, None, None
        self.live = hasattr(stream, "isatty") and stream.isatty()
        self.warned = set()

    def show(self, status, summary):
        if (status, summary) == self.last and not self.live:
            return
        self.last = (status, summary)
        done, total = done_of_total(summary)
        if self.bar is None:  # tqdm draws the bar as it is made: made with what it shows
            self.bar = tqdm(desc=status, total=total, initial=done, postfix=state_counts(summary), file=self.stream,
                            bar_format=BAR_FORMAT, mininterval=0, dynamic_ncols=True)
            return
        self.bar.total, self.bar.n = total, done
        self.bar.set_description_str(status, refresh=False)
        self.bar.set_postfix_str(state_counts(summary), refresh=False)
        self.bar.refresh()

    def warn(self, warnings):
        """Each warning not shown yet (by code and step), on a line of its own: tqdm clears the
        bar, writes the line and draws the bar again below it, so that neither overwrites the other."""
        for warning in warnings:
            if (warning["code"], warning["step"]) not in self.warned:
                self.warned.add((warning["code"], warning["step"]))
                tqdm.write(f"warning: {warning['message']}", file=self.stream)

    def close(self):
        """Leave the bar as last drawn, and the cursor on the line below it: what comes next (the
        command's error, the shell's prompt) starts a line of its own."""
        if self.bar is not None:
            self.bar.close()  # draws it a last time, then a newline
            self.stream.flush()


def done_of_total(summary) -> tuple[int, int]:
    """How many operations are terminal, of how many."""
    return sum(summary[state] for state in OPERATION_TERMINAL), sum(summary.values())


def state_counts(summary) -> str:
    """``succeeded=2, started=1``: the states that have operations, in the order of their enum."""
    return ", ".join(f"{state}={count}" for state, count in summary.items() if count)


def final_line(document) -> str:
    """``completed: 3 of 3 operations done (succeeded=3)``: the last line of a wait, its status first."""
    summary = document["operations_summary"]
    done, total = done_of_total(summary)
    counts = state_counts(summary)
    return f"{document['status']}: {done} of {total} operations done" + (f" ({counts})" if counts else "")


def raw_stream(wrapper):
    """The stream under Django's OutputWrapper, which ends every write with a newline — tqdm
    redraws its line with carriage returns."""
    return getattr(wrapper, "_out", wrapper)


def progress_stream(wrapper):
    """Where a command draws its progress: the stream under ``wrapper`` (its stderr) on a
    terminal, where tqdm redraws its line in place; elsewhere (a file, a pipe, a CI log, where every
    redraw would pile up on one line full of carriage returns) that stream as :class:`LogLines`."""
    stream = raw_stream(wrapper)
    return stream if hasattr(stream, "isatty") and stream.isatty() else LogLines(stream)


#: Where one drawing ends and the next begins: tqdm starts each with a carriage return.
LINE_END = re.compile(r"[\r\n]")


class LogLines:
    """A stream that is not a terminal, as tqdm draws on it: each drawing becomes one line, its
    padding cut, never the same line twice in a row and no carriage return. A drawing is done
    when tqdm flushes it (after each) or starts another; a line of text (a warning) when it ends."""

    def __init__(self, stream):
        self.stream = stream
        self.pending = ""
        self.last = None

    @property
    def encoding(self):
        """The stream's, which tqdm reads to choose its bar's characters."""
        return getattr(self.stream, "encoding", None)

    def isatty(self):
        return False

    def write(self, text):
        *done, self.pending = LINE_END.split(self.pending + text)
        for line in done:
            self._line(line)

    def flush(self):
        self._line(self.pending)
        self.pending = ""
        self.stream.flush()

    def _line(self, text):
        text = text.rstrip()
        if text and text != self.last:
            self.stream.write(text + "\n")
            self.last = text

