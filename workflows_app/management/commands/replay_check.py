"""``manage.py replay_check FILE [FILE ...]``"""

import sys

from django.core.management.base import CommandError

from workflows_app import values
from workflows_app.engine import history, replaycheck
from workflows_app.errors import HistoryRefused
from workflows_app.management.cli import ExecutionCommand

#: The longest verdict printed (a non-determinism names the arguments of both calls, which may
#: be megabytes); a longer one is cut, ending with "…".
MAX_VERDICT = 500
#: The longest file name printed before its verdict.
MAX_PATH = 300
#: The fields of each part of a history the database keeps as floats (seconds, a backoff): those
#: of ``history.TYPES`` that take a number with a fraction.
FLOAT_FIELDS = {part: [name for name, kind in types.items() if isinstance(0.5, kind)]
                for part, types in history.TYPES.items()}


class Command(ExecutionCommand):
    help = ("Replay each history that `export_execution` wrote against today's workflow code, changing nothing: "
            "one line per file, `ok` or why it does not replay; exits 1 unless every one replays.")

    def add_arguments(self, parser):
        parser.add_argument("files", metavar="FILE", nargs="+", help="a history written by export_execution")

    def handle(self, *args, files, **options):
        failed = 0
        for path in files:
            verdict = self.verdict(path)
            failed += verdict != "ok"
            self.stdout.write(f"{cut(path, MAX_PATH)}: {cut(verdict, MAX_VERDICT)}")
        if failed:
            raise CommandError(f"{failed} of {len(files)} histories do not replay with today's code")

    def verdict(self, path) -> str:
        """``ok``, or why the history in ``path`` does not replay (or cannot be read), in one line.
        A history is JSON as Switchyard reads it (``values.loads``: no NaN, no infinity, no number
        too large for a float), its timeouts and intervals numbers a float holds."""
        try:
            with open(path, encoding="utf-8") as file:
                document = values.loads(file)
        except OSError as exc:
            return f"cannot read it: {exc.strerror or exc}"
        except ValueError as exc:  # not JSON (or NaN, a number out of range, nested too deep), or not UTF-8
            return f"cannot read it: not JSON ({' '.join(str(exc).split())[:200]})"
        try:
            check_numbers(document)
            return replaycheck.check(document) or "ok"
        except HistoryRefused as refused:
            return f"cannot read it: {refused}"


def check_numbers(document):
    """``HistoryRefused`` naming the first field of the history (``FLOAT_FIELDS``) that holds a
    whole number too large for a float (JSON has no limit on digits), which no database column of
    a float could store; else nothing."""
    for part, where, fields in parts(document):
        for name in FLOAT_FIELDS[part]:
            value = fields.get(name)
            if isinstance(value, int) and abs(value) > sys.float_info.max:
                raise HistoryRefused(f"{where}: {name} is out of range")


def parts(document):
    """``(part, where, fields)`` of each object of a history: its execution, each step, each wait.
    What is not an object where one belongs is left to ``history.parse``, which refuses it."""
    if not isinstance(document, dict):
        return
    found = [("execution", '"execution"', document.get("execution"))]
    for part in ("steps", "waits"):
        items = document.get(part)
        found += [(part, f'"{part}[{i}]"', item) for i, item in enumerate(items if isinstance(items, list) else [])]
    yield from ((part, where, fields) for part, where, fields in found if isinstance(fields, dict))


def cut(text, limit) -> str:
    """``text``, or its first ``limit`` characters and "…"."""
    return text if len(text) <= limit else text[:limit] + "…"
