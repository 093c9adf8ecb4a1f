"""The admin's schedule form and buttons hold to what the API holds to, through Django's test
client: what a schedule starts and when — its parameters, its timing, unpausing it — need what
starting its workflow needs (``add_execution``), so a user who may only change executions sees
them read-only, cannot unpause it and is offered no Resume, yet may pause it and change the rest;
and a user who is not a superuser cannot give it slots closer than
``WORKFLOWS["SCHEDULE_MIN_INTERVAL"]`` (an error on the form, at the field)."""

import datetime

import pytest

from tests.admin.test_admin import messages_of
from tests.admin.test_schedules import ADD, FORM, T0, act_url, at_t0, buttons, login, page  # noqa: F401 (fixtures)
from tests.api.conftest import OPERATOR
from workflows_app import schedules
from workflows_app.models import Execution, Schedule

pytestmark = pytest.mark.django_db

#: May view and change executions (and so schedules), not start them.
CHANGER = ("view_execution", "change_execution")
#: What the change form posts for the schedule below, as it is.
AS_IT_IS = {**FORM, "cron": "0 3 * * *", "timezone": "Europe/Paris", "paused": "on"}


@pytest.fixture
def nightly():
    """A paused schedule someone else made: its runs would name ``ann``."""
    return schedules.create("demo", {"n": 2}, cron="0 3 * * *", timezone="Europe/Paris", paused=True,
                            created_by="ann")


def timing_of(schedule):
    stored = Schedule.objects.get(pk=schedule.pk)
    return stored.parameters, stored.cron, stored.interval, stored.timezone, stored.paused, stored.next_run_at


def test_a_user_who_may_not_start_sees_what_a_schedule_starts_and_when_read_only(login, nightly):
    client = login(*CHANGER)
    form = client.get(page(nightly)).context["adminform"].form
    assert not {"parameters", "cron", "interval", "timezone"} & set(form.fields), sorted(form.fields)
    assert {"overlap", "catchup_window", "jitter", "paused"} <= set(form.fields)

    before = timing_of(nightly)
    client.post(page(nightly), {**AS_IT_IS, "cron": "", "interval": "1", "timezone": "UTC",
                                "parameters": '{"n": 9}'})
    assert timing_of(nightly) == before and not Execution.objects.exists()


def test_a_user_who_may_not_start_cannot_unpause_a_schedule(login, nightly):
    client = login(*CHANGER)
    response = client.post(page(nightly), {key: value for key, value in AS_IT_IS.items() if key != "paused"})
    assert response.status_code == 200
    said = " ".join(response.context["adminform"].form.non_field_errors())
    assert "may not start" in said and "workflows_app.add_execution" in said, said
    assert Schedule.objects.get(pk=nightly.pk).paused

    assert buttons(client.get(page(nightly))) == [], "no Resume (nor Trigger now) offered"
    said = messages_of(client.post(act_url(nightly), {"action": "resume"}, follow=True))
    assert said[0].startswith("resume refused: staff may not start"), said
    assert Schedule.objects.get(pk=nightly.pk).paused and not Execution.objects.exists()


def test_a_user_who_may_not_start_may_still_pause_and_change_the_rest(login, nightly):
    schedules.resume(nightly.pk)
    client = login(*CHANGER)
    assert buttons(client.get(page(nightly))) == ["pause"]
    response = client.post(page(nightly), {**AS_IT_IS, "overlap": "allow", "jitter": "30"})
    assert response.status_code == 302, response.context["adminform"].form.errors
    stored = Schedule.objects.get(pk=nightly.pk)
    assert (stored.overlap, stored.jitter, stored.paused, stored.cron) == ("allow", 30, True, "0 3 * * *")


def test_a_user_who_may_start_changes_it_all(login, nightly):
    client = login(*OPERATOR)
    response = client.post(page(nightly), {key: value for key, value in AS_IT_IS.items() if key != "paused"}
                           | {"cron": "", "interval": "3600"})
    assert response.status_code == 302, response.context["adminform"].form.errors
    stored = Schedule.objects.get(pk=nightly.pk)
    assert (stored.interval, stored.paused, stored.next_run_at) == (3600, False, T0 + datetime.timedelta(hours=1))


def test_the_forms_keep_a_users_slots_the_minimum_interval_apart(login, nightly, settings):
    client = login(*OPERATOR)
    refused = client.post(ADD, {**FORM, "interval": "5"})
    assert refused.status_code == 200
    said = " ".join(refused.context["adminform"].form.errors["interval"])
    assert "at least 10 seconds" in said and "SCHEDULE_MIN_INTERVAL" in said, said
    refused = client.post(page(nightly), {**AS_IT_IS, "cron": "", "interval": "5"})
    assert "at least 10 seconds" in " ".join(refused.context["adminform"].form.errors["interval"])
    assert Schedule.objects.count() == 1 and Schedule.objects.get().cron == "0 3 * * *"

    settings.WORKFLOWS = {**getattr(settings, "WORKFLOWS", {}), "SCHEDULE_MIN_INTERVAL": 120}
    refused = client.post(ADD, {**FORM, "cron": "* * * * *"})
    assert "at least 120 seconds" in " ".join(refused.context["adminform"].form.errors["cron"])
    assert client.post(ADD, {**FORM, "cron": "*/2 * * * *"}).status_code == 302
    assert Schedule.objects.count() == 2


def test_a_superuser_is_not_held_to_the_minimum_interval(login):
    client = login(superuser=True)
    assert client.post(ADD, {**FORM, "interval": "1"}).status_code == 302
    assert Schedule.objects.get().interval == 1
