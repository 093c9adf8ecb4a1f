"""The minimum interval between two slots of a schedule (``WORKFLOWS["SCHEDULE_MIN_INTERVAL"]``):
the setting, checked as the other WORKFLOWS keys are; whom it holds (``schedules.min_interval``);
and how ``schedules.check_spacing`` finds the two closest slots of a cron expression — whatever
the day they fall on, overnight, and around a daylight-saving change."""

import datetime

import pytest
from django.core import checks
from django.test import override_settings

from tests.api.conftest import OPERATOR, make_user
from workflows_app import clock, schedules
from workflows_app.conf import DEFAULTS, workflows_settings
from workflows_app.errors import ConfigurationError, ParameterError

T0 = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.timezone.utc)


@pytest.fixture(autouse=True)
def at_t0():
    with clock.using(lambda: T0):
        yield


# --- the setting ---------------------------------------------------------------------------------

def test_the_default_is_ten_seconds():
    assert DEFAULTS["SCHEDULE_MIN_INTERVAL"] == 10
    with override_settings(WORKFLOWS={}):
        assert workflows_settings.SCHEDULE_MIN_INTERVAL == 10
    with override_settings(WORKFLOWS={"SCHEDULE_MIN_INTERVAL": 300}):
        assert workflows_settings.SCHEDULE_MIN_INTERVAL == 300


@pytest.mark.django_db
@pytest.mark.parametrize("value", [-1, "10", True, None])
def test_a_minimum_that_is_not_a_number_of_seconds_is_a_system_check_error(value):
    with override_settings(WORKFLOWS={"SCHEDULE_MIN_INTERVAL": value}):
        errors = checks.run_checks()
        assert [e.id for e in errors] == ["workflows.E002"] and "SCHEDULE_MIN_INTERVAL" in errors[0].msg
        with pytest.raises(ConfigurationError, match="SCHEDULE_MIN_INTERVAL"):
            workflows_settings.SCHEDULE_MIN_INTERVAL


@pytest.mark.django_db
def test_it_holds_users_but_not_superusers_nor_the_servers_own_access():
    assert schedules.min_interval(make_user("ops", OPERATOR)) == 10
    assert schedules.min_interval(make_user("root", is_superuser=True)) == 0
    assert schedules.min_interval(make_user("gone", is_superuser=True, is_active=False)) == 10
    assert schedules.min_interval(None) == 0, "the commands"


# --- how close a cron expression's slots come -------------------------------------------------------

def refused(minimum, cron, timezone="UTC"):
    """What ``check_spacing`` says of the expression, or None when it takes it."""
    try:
        schedules.check_spacing(cron=cron, timezone=timezone, minimum=minimum)
    except ParameterError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("minimum, cron, timezone", [
    (10, "* * * * *", "UTC"),  # whole minutes: any expression is 60 s apart at least
    (60, "* * * * *", "Europe/Paris"),
    (120, "*/2 * * * *", "Europe/Paris"),
    (3600, "@hourly", "Europe/Paris"),  # every real hour, the daylight-saving days included
    (900, "*/15 * * * *", "Australia/Lord_Howe"),  # a half-hour daylight-saving change
    (7200, "0 0,23 * * mon", "UTC"),  # 23:00 on Monday, then 00:00 the next Monday
    (172800, "0 0 L * *", "UTC"),
    (900, "*/25 2 * * *", "UTC"),
])
def test_slots_far_enough_apart_are_taken(minimum, cron, timezone):
    assert refused(minimum, cron, timezone) is None


@pytest.mark.parametrize("minimum, cron, timezone, says", [
    (120, "* * * * *", "UTC", "60 seconds apart"),
    (120, "0,1 * * * *", "UTC", "60 seconds apart"),
    (120, "* * 1 1 *", "UTC", "60 seconds apart"),  # only on the 1st of January, months from now
    (120, "0,1 0 1 1 *", "UTC", "60 seconds apart"),
    (7200, "0 0,23 * * *", "UTC", "3600 seconds apart"),  # 23:00, then 00:00 the next day
    (172800, "0 0 1,L * *", "UTC", "86400 seconds apart"),  # the last of a month, then the 1st
    # Spring in Paris: 02:30 does not happen, so it fires at 03:00 summer time, a minute after 01:59.
    (600, "30,59 1,2 * * *", "Europe/Paris", "60 seconds apart on 2026-03-29, a daylight-saving change"),
    # Autumn: 02:00-02:59 happens twice, so 02:50 summer time is followed by 02:00 winter time.
    (900, "*/25 2 * * *", "Europe/Paris", "600 seconds apart on 2026-10-25, a daylight-saving change"),
])
def test_slots_closer_than_the_minimum_are_refused_naming_the_field_and_the_minimum(minimum, cron, timezone, says):
    said = refused(minimum, cron, timezone)
    assert said is not None and said.startswith("cron: ") and says in said, said
    assert f"at least {minimum} seconds apart (the minimum interval" in said


def test_an_interval_is_its_own_spacing():
    schedules.check_spacing(interval=10, minimum=10)
    with pytest.raises(ParameterError, match=r"^interval must be at least 10 seconds .*, not 9$"):
        schedules.check_spacing(interval=9, minimum=10)
    schedules.check_spacing(interval=1, minimum=0)
