"""``manage.py replay_check FILE [FILE ...]``"""

import json

from django.core.management.base import CommandError

from workflows_app.engine import replaycheck
from workflows_app.errors import HistoryRefused
from workflows_app.management.cli import ExecutionCommand


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
            self.stdout.write(f"{path}: {verdict}")
        if failed:
            raise CommandError(f"{failed} of {len(files)} histories do not replay with today's code")

    def verdict(self, path) -> str:
        """``ok``, or why the history in ``path`` does not replay (or cannot be read), in one line."""
        try:
            with open(path, encoding="utf-8") as file:
                document = json.load(file)
        except OSError as exc:
            return f"cannot read it: {exc.strerror or exc}"
        except (ValueError, RecursionError) as exc:  # not JSON (or nested too deep), or not UTF-8
            return f"cannot read it: not JSON ({' '.join(str(exc).split())[:200]})"
        try:
            return replaycheck.check(document) or "ok"
        except HistoryRefused as refused:
            return f"cannot read it: {refused}"
