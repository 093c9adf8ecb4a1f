"""Values past what a command can take — a deployment longer than its column, a limit or a number
of days no query or date holds, a history whose numbers no float holds — are refused in one line
(``CommandError``, which ``manage.py`` prints as one line and a non-zero exit), never a traceback,
and nothing is stored; what a command echoes back of its input is cut short."""

import io
import json
import re
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from tests.commands.test_replay_commands import refused
from workflows_app.models import Execution


# --- start_execution --deployment -----------------------------------------------------------------

def test_a_deployment_longer_than_its_column_is_refused_naming_the_limit(db):
    said, out = refused("start_execution", "demo", "--deployment", "d" * 300)
    assert said == "deployment_id: at most 200 characters, not 300"
    assert out == "" and not Execution.objects.exists()


def test_a_deployment_the_api_takes_is_taken_whole(db):
    out = io.StringIO()
    call_command("start_execution", "demo", "--deployment", "d" * 200, "--json", stdout=out)
    assert json.loads(out.getvalue())["deployment_id"] == "d" * 200


def test_a_deployment_with_a_null_character_is_refused_as_the_api_refuses_it(db):
    said, _ = refused("start_execution", "demo", "--deployment", "d\x00")
    assert said == "deployment_id: null characters (\\u0000) are not allowed"
    assert not Execution.objects.exists()


def test_a_rerun_checks_its_deployment_the_same_way(make_execution, make_operation):
    original = make_execution(status="failed", workflow_id="demo")
    make_operation("failed", original, name="a")
    said, _ = refused("start_execution", "--rerun-of", str(original.pk), "--from-step", "a", "--deployment", "d" * 201)
    assert said == "deployment_id: at most 200 characters, not 201"
    assert Execution.objects.count() == 1


# --- list_executions / list_schedules --limit ---------------------------------------------------------

@pytest.mark.parametrize("command", ["list_executions", "list_schedules"])
@pytest.mark.parametrize("limit, shown", [
    ("99999999999999999999", "99999999999999999999"),
    ("9223372036854775808", "9223372036854775808"),
    ("10001", "10001"),
    ("0", "0"),
    ("-1", "-1"),
    pytest.param("9" * 4000, "9" * 60 + "…", id="4000-digits"),
])
def test_a_limit_out_of_range_is_refused_stating_the_range(db, command, limit, shown):
    assert refused(command, "--limit", limit) == (f"--limit must be from 1 to 10000, not {shown}", "")


@pytest.mark.parametrize("command", ["list_executions", "list_schedules"])
def test_the_largest_limit_is_taken(db, command):
    out = io.StringIO()
    call_command(command, "--limit", "10000", "--json", stdout=out)
    assert json.loads(out.getvalue()) == []


# --- purge_executions --older-than ---------------------------------------------------------------------

@pytest.mark.parametrize("days", ["1e308", "1e9", "800000"])
def test_a_number_of_days_before_the_year_1_is_refused(make_execution, days):
    kept = make_execution(status="completed", ended_at=timezone.now() - timedelta(days=40))
    said, out = refused("purge_executions", "--older-than", days)
    assert re.fullmatch(rf"--older-than takes at most \d+ days \(back to the year 1\), not '{days}'", said), said
    most = int(said.split()[4])
    assert most == (timezone.now() - datetime.min.replace(tzinfo=dt_timezone.utc)).days
    assert out == "" and Execution.objects.filter(pk=kept.pk).exists()


def test_the_furthest_number_of_days_back_is_taken(db):
    said, _ = refused("purge_executions", "--older-than", "1e308")
    most = said.split("at most ", 1)[1].split(" ", 1)[0]
    out = io.StringIO()
    call_command("purge_executions", "--older-than", most, "--dry-run", "--json", stdout=out, stderr=io.StringIO())
    assert json.loads(out.getvalue())["executions"] == 0


def test_a_long_number_of_days_is_quoted_short(db):
    said, _ = refused("purge_executions", "--older-than", "x" * 100_000)
    assert said == f"--older-than takes a number of days >= 0, not {'x' * 60!r}…"


# --- replay_check ----------------------------------------------------------------------------------------

def history(execution=None, steps=(), waits=()) -> str:
    """A history of the ``demo`` workflow as export_execution writes it, as JSON text; ``execution``:
    text spliced into its execution object (a number JSON allows and Python's json reads)."""
    return ('{"format": "switchyard.history", "version": 1, "execution": {"workflow_id": "demo"%s}, '
            '"steps": %s, "waits": %s}' % (f", {execution}" if execution else "", json.dumps(list(steps)),
                                          json.dumps(list(waits))))


def replay_check(tmp_path, text) -> tuple[str, str]:
    path = tmp_path / "history.json"
    path.write_text(text)
    said, out = refused("replay_check", str(path))
    assert said == "1 of 1 histories do not replay with today's code"
    assert out.startswith(f"{path}: ")
    return out[len(f"{path}: "):].rstrip("\n"), path


@pytest.mark.parametrize("number, why", [
    ("NaN", "NaN is not valid JSON"),
    ("-Infinity", "-Infinity is not valid JSON"),
    ("Infinity", "Infinity is not valid JSON"),
    ("1e400", "number out of range: 1e400"),
])
def test_a_history_with_a_number_json_does_not_have_is_not_read(db, tmp_path, number, why):
    verdict, _ = replay_check(tmp_path, history(f'"timeout": {number}'))
    assert verdict == f"cannot read it: not JSON ({why})"
    assert not Execution.objects.exists()


@pytest.mark.parametrize("execution, steps, waits, where", [
    pytest.param('"timeout": 1' + "0" * 400, [], [], '"execution": timeout', id="timeout"),
    pytest.param('"timeout": -1' + "0" * 400, [], [], '"execution": timeout', id="negative-timeout"),
    pytest.param(None, [{"name": "a", "operation": "x", "state": "succeeded", "retry_interval": 10 ** 400}], [],
                 '"steps[0]": retry_interval', id="retry_interval"),
    pytest.param(None, [{"name": "a", "operation": "x", "state": "succeeded", "retry_backoff": 10 ** 309}], [],
                 '"steps[0]": retry_backoff', id="retry_backoff"),
    pytest.param(None, [], [{"key": "event:go#1", "kind": "event", "timeout": 10 ** 400}], '"waits[0]": timeout',
                 id="wait-timeout"),
])
def test_a_history_with_a_number_no_float_holds_is_refused_naming_it(db, tmp_path, execution, steps, waits, where):
    verdict, _ = replay_check(tmp_path, history(execution, steps, waits))
    assert verdict == f"cannot read it: not an execution history: {where} is out of range"
    assert not Execution.objects.exists()


def test_a_history_with_the_largest_floats_is_read_and_replayed(db, tmp_path):
    waits = [{"key": "w", "kind": "event", "timeout": -1e308}]
    verdict, _ = replay_check(tmp_path, history('"timeout": 1.7976931348623157e308', waits=waits))
    assert verdict.startswith("non-deterministic workflow: this replay asked for step '0:add', which the history "
                              "does not hold, before reaching the history's wait 'w'")


def test_a_long_verdict_is_cut_short(db, tmp_path):
    """A non-determinism names the arguments stored: a step's megabytes are not printed back."""
    step = {"name": "0:add", "operation": "elsewhere", "state": "succeeded", "args": ["x" * 1_000_000]}
    verdict, _ = replay_check(tmp_path, history(steps=[step]))
    assert verdict.startswith("non-deterministic workflow: step '0:add' was stored as elsewhere args=['xxx")
    assert len(verdict) == 501 and verdict.endswith("x…")


def test_a_long_file_name_is_cut_short(db):
    out = io.StringIO()
    with pytest.raises(CommandError, match="^1 of 1 histories do not replay with today's code$"):
        call_command("replay_check", "h" * 1_000_000, stdout=out, stderr=io.StringIO())
    assert out.getvalue() == "h" * 300 + "…: cannot read it: File name too long\n"


# --- --wait --timeout ---------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [["start_execution", "demo"], ["resume_execution", "0000"]])
@pytest.mark.parametrize("timeout", ["nan", "inf", "0", "-1", "soon"])
def test_a_wait_timeout_that_would_never_end_or_is_no_number_is_refused(db, command, timeout):
    said, _ = refused(*command, "--wait", "--timeout", timeout)
    assert said.startswith("Error: argument --timeout: a number of seconds"), said
    assert not Execution.objects.exists()
