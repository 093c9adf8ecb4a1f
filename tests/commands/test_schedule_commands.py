"""The commands on schedules: ``create_schedule``, ``list_schedules``, ``update_schedule``,
``pause_schedule``, ``resume_schedule``, ``trigger_schedule``, ``delete_schedule``. Each calls the
one service (``workflows_app.schedules``) with the server's own access; ``--json`` prints what the
REST API answers; a refused value is one line on stderr and exit status 1 (checked on ``python
manage.py`` run as a child process), never a traceback."""

import datetime
import io
import json
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from tests.api.conftest import OPERATOR, make_user
from tests.commands.test_commands import child_env, manage  # noqa: F401  (child_env: a fixture)
from workflows_app import clock, schedules
from workflows_app.models import Execution, Schedule, ScheduleSlot

API = "/api/v1"
UTC = datetime.timezone.utc
T0 = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def command(*args) -> str:
    """``call_command(*args)``: what it printed on stdout."""
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def at_t0(db):
    """The engine's clock at T0; the test moves it on with ``at_t0.now = ...``."""

    class At:
        now = T0

    moment = At()
    with clock.using(lambda: moment.now):
        yield moment


@pytest.fixture
def api(db):
    client = APIClient()
    client.force_authenticate(make_user("ops", OPERATOR))
    return client


def test_create_schedule_takes_every_field_and_prints_its_id_and_next_run(at_t0):
    out = command("create_schedule", "demo", "--cron", "0 3 * * *", "--timezone", "Europe/Paris", "--param", "n=2",
                  "--param", "agent=host-1", "--overlap", "buffer_one", "--catchup-window", "600", "--jitter", "5")
    schedule = Schedule.objects.get()
    assert out == f"{schedule.pk} next 2026-03-02 02:00:00Z\n"
    assert (schedule.workflow_id, schedule.parameters, schedule.cron, schedule.timezone) == (
        "demo", {"n": 2, "agent": "host-1"}, "0 3 * * *", "Europe/Paris")
    assert (schedule.overlap, schedule.catchup_window, schedule.jitter, schedule.created_by) == (
        "buffer_one", 600, 5, "manage.py")


def test_create_schedule_json_is_the_schedule_as_the_api_shows_it(at_t0, api):
    out = command("create_schedule", "demo", "--interval", "300", "--parameters", '{"n": 1}', "--paused", "--json")
    document = json.loads(out)
    assert document["paused"] and document["next_run_at"] is None and document["parameters"] == {"n": 1}
    assert out == api.get(f"{API}/schedules/{document['id']}").content.decode() + "\n"


def test_list_schedules_prints_a_table_and_filters(at_t0, api):
    nightly = schedules.create("demo", cron="0 3 * * *", timezone="Europe/Paris")
    every = schedules.create("demo", interval=60, overlap="allow", paused=True)
    lines = command("list_schedules").splitlines()
    assert lines[0].split() == ["ID", "WORKFLOW", "TIMING", "TIMEZONE", "OVERLAP", "STATE", "NEXT", "RUN", "LAST",
                                "RUN"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {str(nightly.pk), str(every.pk)}
    assert rows[str(nightly.pk)].split() == [str(nightly.pk), "demo", "0", "3", "*", "*", "*", "Europe/Paris",
                                             "skip", "active", "2026-03-02", "02:00:00Z", "-"]
    assert "every 60s" in rows[str(every.pk)] and "paused" in rows[str(every.pk)]
    assert [line.split()[0] for line in command("list_schedules", "--paused").splitlines()[1:]] == [str(every.pk)]
    assert [line.split()[0] for line in command("list_schedules", "--active").splitlines()[1:]] == [str(nightly.pk)]
    assert command("list_schedules", "--workflow", "other").splitlines()[1:] == []
    assert json.loads(command("list_schedules", "--json")) == api.get(f"{API}/schedules").json()["results"]


def test_update_pause_resume_trigger_and_delete_by_id_or_its_start(at_t0, django_capture_on_commit_callbacks):
    schedule = schedules.create("demo", {"n": 1}, cron="0 3 * * *")
    short = str(schedule.pk)[:8]
    assert command("update_schedule", short, "--interval", "600", "--jitter", "7") == (
        f"{schedule.pk} next 2026-03-01 12:10:00Z\n")
    changed = Schedule.objects.get()
    assert (changed.cron, changed.interval, changed.jitter, changed.parameters) == ("", 600, 7, {"n": 1})

    assert command("pause_schedule", short) == f"{schedule.pk} paused\n" and Schedule.objects.get().paused
    with django_capture_on_commit_callbacks():
        out = command("trigger_schedule", str(schedule.pk))
    execution = Execution.objects.get()
    assert out == f"started {execution.pk}\n" and execution.schedule_id == schedule.pk
    at_t0.now = T0 + datetime.timedelta(seconds=1)
    with django_capture_on_commit_callbacks(), pytest.raises(CommandError, match="the run was skipped: its execution"):
        command("trigger_schedule", short)  # the first run is still active: under "skip", exit 1
    assert Execution.objects.count() == 1
    assert command("resume_schedule", short) == f"{schedule.pk} next 2026-03-01 12:10:00Z\n"

    assert command("delete_schedule", short) == f"deleted schedule {schedule.pk}\n"
    assert not Schedule.objects.exists() and not ScheduleSlot.objects.exists()
    assert Execution.objects.get().schedule_id is None, "its executions stay"


def test_trigger_schedule_json_is_the_apis_answer(at_t0, django_capture_on_commit_callbacks):
    schedule = schedules.create("demo", interval=60)
    with django_capture_on_commit_callbacks():
        document = json.loads(command("trigger_schedule", str(schedule.pk), "--json"))
    assert document["triggered"]["outcome"] == "started" and document["last_run_at"] == "2026-03-01T12:00:00Z"
    assert document["triggered"]["execution"] == str(Execution.objects.get().pk)


@pytest.mark.parametrize("args, says", [
    (["create_schedule", "nope", "--interval", "60"], "no workflow named 'nope'"),
    (["create_schedule", "demo", "--cron", "0 25 * * *"], "cron: the hour field '25' is not valid"),
    (["create_schedule", "demo", "--interval", "0"], "interval must be from 1"),
    (["create_schedule", "demo", "--interval", "60", "--timezone", "Mars/Olympus"], "not a known time zone"),
    (["create_schedule", "demo", "--interval", "60", "--jitter", "-1"], "jitter must be a whole number"),
    (["create_schedule", "demo", "--interval", "60", "--param", "colour=red"], "unknown parameter(s): colour"),
    (["create_schedule", "demo", "--interval", "60", "--param", "agent=a\x00b"], "null characters"),
    (["create_schedule", "demo", "--interval", "60", "--param", "agent=\udcff"], "lone surrogates"),
    (["create_schedule", "demo", "--interval", "60", "--parameters", '{"n": NaN}'], "--parameters: not JSON"),
    (["create_schedule", "demo", "--interval", "60", "--param", "agent=" + "x" * (3 * 1024 * 1024)],
     "MAX_PAYLOAD_BYTES"),
    (["pause_schedule", str(uuid.uuid4())], "no schedule"),
    (["trigger_schedule", "zz-top"], "no schedule 'zz-top': a schedule id is hex digits"),
    (["delete_schedule", "abc"], "give at least 4 digits"),
    (["update_schedule", "{id}"], "nothing to change"),
    (["update_schedule", "{id}", "--cron", "never"], "cron: 'never' has 1 fields"),
])
def test_a_refused_value_is_a_command_error_and_nothing_changes(at_t0, args, says):
    schedule = schedules.create("demo", interval=60)
    before = list(Schedule.objects.values())
    with pytest.raises(CommandError) as refused:
        command(*[arg.replace("{id}", str(schedule.pk)) for arg in args])
    assert says in str(refused.value) and "\n" not in str(refused.value)
    assert list(Schedule.objects.values()) == before


def test_the_commands_act_with_the_servers_access_and_the_minimum_interval_is_not_theirs(at_t0, settings):
    """An operator with a shell on the server acts for no user (``created_by`` is manage.py), as a
    superuser would: ``WORKFLOWS["SCHEDULE_MIN_INTERVAL"]``, which holds users of the API and the
    admin to it, does not hold the commands."""
    settings.WORKFLOWS = {**getattr(settings, "WORKFLOWS", {}), "SCHEDULE_MIN_INTERVAL": 120}
    schedule_id = command("create_schedule", "demo", "--interval", "5").split()[0]
    command("update_schedule", schedule_id, "--cron", "* * * * *")
    assert (Schedule.objects.get().cron, Schedule.objects.get().created_by) == ("* * * * *", "manage.py")


def test_an_ambiguous_start_of_an_id_is_refused_naming_the_schedules(at_t0):
    for n in range(2):
        Schedule.objects.create(id=uuid.UUID(f"abcd{n:028x}"), workflow_id="demo", interval=60)
    with pytest.raises(CommandError, match="'abcd' is the start of 2 schedule ids: abcd0000-.* give more of it"):
        command("pause_schedule", "abcd")


@pytest.mark.integration
def test_what_a_script_sees_of_a_refusal_one_line_on_stderr_and_a_non_zero_exit(child_env):  # noqa: F811
    cases = [(["create_schedule", "it_single", "--cron", "0 25 * * *", "--param", "agent=a"], 1,
              "CommandError: cron: the hour field '25' is not valid"),
             (["trigger_schedule", str(uuid.uuid4()), "--json"], 1, "CommandError: no schedule"),
             (["create_schedule", "it_single", "--cron", "* * * * *", "--interval", "60"], 2,
              "manage.py create_schedule: error: argument --interval: not allowed with argument --cron")]
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda case: manage(child_env, *case[0]), cases))
    for (argv, status, says), done in zip(cases, results):
        assert (done.returncode, done.stdout) == (status, ""), (argv, done.returncode, done.stdout, done.stderr)
        assert done.stderr.startswith(says) and done.stderr.count("\n") == 1, (argv, done.stderr)
    assert not Schedule.objects.exists()
