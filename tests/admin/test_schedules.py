"""Schedules in the admin, through Django's test client: the list, the form that creates and
changes one (checked by the same service as the API: a refusal is an error on the form, never a
500, and nothing is stored), a schedule's page with its slots (missed runs included) linked to
their executions, the actions pause, resume and trigger now with their permissions, the delete
that keeps the executions, and an execution's page linking its schedule. The tests are not
transactional: a trigger's Celery message (on commit) is not sent."""

import datetime
import re

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from tests.admin.test_admin import messages_of
from tests.api.conftest import GUARDED, OPERATOR, VIEWER, make_user, register_guarded
from tests.typed_workflows import register as register_typed
from workflows_app import clock, schedules
from workflows_app.models import Execution, Schedule, ScheduleSlot
from workflows_app.states import SlotOutcome

pytestmark = pytest.mark.django_db

LIST = reverse("admin:workflows_app_schedule_changelist")
ADD = reverse("admin:workflows_app_schedule_add")
UTC = datetime.timezone.utc
T0 = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
#: What the add form posts for a valid schedule, but for the fields a test changes.
FORM = {"workflow_id": "demo", "parameters": '{"n": 2}', "cron": "", "interval": "", "timezone": "UTC",
        "overlap": "skip", "catchup_window": "0", "jitter": "0"}


def page(schedule):
    return reverse("admin:workflows_app_schedule_change", args=[schedule.pk])


def act_url(schedule):
    return reverse("admin:workflows_app_schedule_act", args=[schedule.pk])


def buttons(response):
    return re.findall(r'data-action="([a-z]+)"', response.content.decode())


def stored():
    return list(Schedule.objects.values()), ScheduleSlot.objects.count(), Execution.objects.count()


@pytest.fixture(autouse=True)
def at_t0():
    with clock.using(lambda: T0):
        yield


@pytest.fixture
def login(client):
    """``login(*codenames, superuser=False)``: the test client, logged in as a staff user holding these."""

    def log_in(*codenames, superuser=False):
        if superuser:
            user = get_user_model().objects.create_superuser("super", "super@localhost", "pw")
        else:
            user = make_user("staff", codenames, is_staff=True)
        client.force_login(user)
        return client

    return log_in


@pytest.fixture
def nightly():
    return schedules.create("demo", {"n": 2}, cron="0 3 * * *", timezone="Europe/Paris", created_by="ann")


def test_the_list_shows_the_workflow_timing_zone_policy_state_and_runs(login, nightly):
    schedules.create("demo", interval=300, overlap="allow", paused=True)
    client = login(*VIEWER)
    listed = client.get(LIST).content.decode()
    assert str(nightly.pk)[:8] in listed and "0 3 * * *" in listed and "Europe/Paris" in listed
    assert "every 5m 00s" in listed and "allow" in listed and "paused" in listed and "active" in listed
    assert "2026-03-02" in listed, "the next run"
    assert client.get(LIST, {"paused__exact": "1"}).context["cl"].result_count == 1


def test_the_add_form_creates_the_schedule_through_the_service(login):
    client = login(*OPERATOR)
    response = client.post(ADD, {**FORM, "cron": "0 3 * * *", "timezone": "Europe/Paris", "jitter": "30"})
    assert response.status_code == 302, response.context["adminform"].form.errors if response.context else response
    schedule = Schedule.objects.get()
    assert (schedule.workflow_id, schedule.parameters, schedule.cron, schedule.interval, schedule.jitter) == (
        "demo", {"n": 2}, "0 3 * * *", None, 30)
    assert schedule.next_run_at == datetime.datetime(2026, 3, 2, 2, 0, tzinfo=UTC)
    assert schedule.created_by == "staff"


@pytest.mark.parametrize("changes, field, says", [
    ({"cron": "0 25 * * *"}, "cron", "hour field"),
    ({}, "cron", "a cron expression or an interval"),
    ({"cron": "* * * * *", "interval": "60"}, "cron", "not both"),
    ({"interval": "0"}, "interval", "from 1"),
    ({"interval": "60", "timezone": "Mars/Olympus"}, "timezone", "not a known time zone"),
    ({"interval": "60", "parameters": '{"nope": 1}'}, "parameters", "nope"),
    ({"interval": "60", "parameters": '{"agent": "a\\u0000b"}'}, "parameters", "null characters"),
    ({"interval": "60", "parameters": '{"n": NaN}'}, "parameters", "not JSON"),
    ({"interval": "60", "parameters": '{"agent": "' + "x" * (3 * 1024 * 1024) + '"}'}, "parameters",
     "MAX_PAYLOAD_BYTES"),
    ({"interval": "60", "parameters": "[1]"}, "parameters", "object"),
    ({"interval": "60", "cron": "0 3 * * *\x00"}, "cron", "Null characters"),
    ({"interval": "60", "jitter": "-1"}, "jitter", "greater than or equal to 0"),
])
def test_what_the_service_refuses_is_an_error_on_the_form_and_nothing_is_stored(login, settings, changes, field, says):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10 * 1024 * 1024  # the 3 MB value reaches the form
    response = login(*OPERATOR).post(ADD, {**FORM, **changes})
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert field in errors and says in " ".join(errors[field]), errors
    assert not Schedule.objects.exists()


def test_parameters_that_do_not_fit_a_typed_workflow_are_refused_on_the_form(login, monkeypatch):
    typed = register_typed(monkeypatch)
    response = login(*OPERATOR).post(ADD, {**FORM, "workflow_id": typed, "parameters": '{"n": "three"}',
                                           "interval": "60"})
    assert "parameter 'n': expected integer" in " ".join(response.context["adminform"].form.errors["parameters"])
    assert not Schedule.objects.exists()


def test_the_change_form_changes_through_the_service_and_keeps_the_workflow(login, nightly):
    client = login(*OPERATOR)
    form = client.get(page(nightly)).context["adminform"].form
    assert "workflow_id" not in form.fields, "a schedule's workflow never changes"
    response = client.post(page(nightly), {**FORM, "workflow_id": "other", "cron": "30 4 * * *",
                                           "timezone": "Europe/Paris", "parameters": '{"n": 5}'})
    assert response.status_code == 302
    changed = Schedule.objects.get(pk=nightly.pk)
    assert (changed.workflow_id, changed.cron, changed.parameters) == ("demo", "30 4 * * *", {"n": 5})
    assert changed.next_run_at == datetime.datetime(2026, 3, 2, 3, 30, tzinfo=UTC), "planned again"

    before = stored()
    refused = client.post(page(nightly), {**FORM, "cron": "30 4 * * *", "timezone": "Nowhere"})
    assert refused.status_code == 200 and "timezone" in refused.context["adminform"].form.errors
    assert stored() == before


def test_a_schedules_page_shows_its_slots_missed_ones_included_with_their_executions(
        login, nightly, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks():
        started = schedules.trigger(nightly.pk)
    ScheduleSlot.objects.create(schedule=nightly, slot=T0 - datetime.timedelta(days=3), outcome=SlotOutcome.MISSED,
                                slots=3, until=T0 - datetime.timedelta(days=1), reason="no manager ran")
    client = login(*VIEWER)
    content = client.get(page(nightly)).content.decode()
    slots = content[content.index('id="sy-slots"'):]
    assert "started" in slots and reverse("admin:workflows_app_execution_change", args=[started.execution_id]) in slots
    assert "missed" in slots and "(3 slots)" in slots and "no manager ran" in slots
    assert f"?schedule__id__exact={nightly.pk}" in content

    # The execution's page links back to its schedule, at its slot.
    execution_page = client.get(reverse("admin:workflows_app_execution_change", args=[started.execution_id]))
    assert f"{page(nightly)}#slot-of-{started.execution_id}" in execution_page.content.decode()
    assert f'id="slot-of-{started.execution_id}"' in content
    executions = client.get(reverse("admin:workflows_app_execution_changelist"),
                            {"schedule__id__exact": str(nightly.pk)})
    assert executions.status_code == 200 and executions.context["cl"].result_count == 1


def test_the_buttons_pause_resume_and_trigger(login, nightly, django_capture_on_commit_callbacks):
    client = login(*OPERATOR)
    assert buttons(client.get(page(nightly))) == ["pause", "trigger"]
    response = client.post(act_url(nightly), {"action": "pause"}, follow=True)
    assert messages_of(response) == [f"schedule {nightly.pk} is paused"]
    assert Schedule.objects.get(pk=nightly.pk).paused and buttons(response) == ["resume", "trigger"]

    with django_capture_on_commit_callbacks():
        response = client.post(act_url(nightly), {"action": "trigger"}, follow=True)
    slot = ScheduleSlot.objects.get()
    assert slot.outcome == "started" and messages_of(response) == [
        f"triggered schedule {nightly.pk}: started: execution {slot.execution_id}"]

    response = client.post(act_url(nightly), {"action": "resume"}, follow=True)
    assert not Schedule.objects.get(pk=nightly.pk).paused
    assert messages_of(response) == [f"schedule {nightly.pk} is active"]
    assert messages_of(client.post(act_url(nightly), {"action": "explode"}, follow=True)) == [
        "unknown action 'explode'"]


def test_the_list_actions_pause_and_resume_the_selected_schedules(login, nightly):
    other = schedules.create("demo", interval=60)
    client = login(*OPERATOR)
    client.post(LIST, {"action": "pause_selected", "_selected_action": [nightly.pk, other.pk]})
    assert list(Schedule.objects.values_list("paused", flat=True)) == [True, True]
    client.post(LIST, {"action": "resume_selected", "_selected_action": [other.pk]})
    assert not Schedule.objects.get(pk=other.pk).paused and Schedule.objects.get(pk=nightly.pk).paused


def test_a_viewer_sees_and_may_do_nothing(login, nightly):
    client = login(*VIEWER)
    assert client.get(page(nightly)).status_code == 200 and buttons(client.get(page(nightly))) == []
    assert re.findall(r'<option value="([a-z_]+)"', client.get(LIST).content.decode()) == []
    assert client.get(ADD).status_code == 403
    before = stored()
    for action in ("pause", "trigger"):
        said = messages_of(client.post(act_url(nightly), {"action": action}, follow=True))
        assert said[0].startswith(f"{action} refused: staff may not {action}"), said
    client.post(LIST, {"action": "pause_selected", "_selected_action": [nightly.pk]})
    client.post(page(nightly), {**FORM, "cron": "* * * * *"})
    client.post(reverse("admin:workflows_app_schedule_delete", args=[nightly.pk]), {"post": "yes"})
    assert stored() == before


def test_nobody_without_view_execution_sees_schedules(login, nightly):
    client = login()
    assert client.get(LIST).status_code == 403 and client.get(page(nightly)).status_code == 403


def test_a_schedule_of_a_hidden_workflow_is_not_shown(login, nightly, monkeypatch):
    register_guarded(monkeypatch)
    hidden = schedules.create(GUARDED, interval=60)
    client = login(*OPERATOR)
    listed = client.get(LIST).content.decode()
    assert str(nightly.pk)[:8] in listed and str(hidden.pk)[:8] not in listed
    assert client.get(page(hidden), follow=True).redirect_chain, "not found: back to the list"
    assert GUARDED not in dict(client.get(ADD).context["adminform"].form.fields["workflow_id"].choices)
    before = stored()
    client.post(act_url(hidden), {"action": "trigger"})
    assert stored() == before


def test_deleting_a_schedule_keeps_its_executions(login, nightly, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks():
        started = schedules.trigger(nightly.pk)
    client = login(superuser=True)
    delete = reverse("admin:workflows_app_schedule_delete", args=[nightly.pk])
    confirm = client.get(delete).content.decode()
    assert "Slot records (their executions stay): 1" in confirm
    assert client.post(delete, {"post": "yes"}).status_code == 302
    assert not Schedule.objects.exists()
    assert Execution.objects.get(pk=started.execution_id).schedule_id is None
    execution_page = client.get(reverse("admin:workflows_app_execution_change", args=[started.execution_id]))
    assert "a deleted schedule" in execution_page.content.decode()
