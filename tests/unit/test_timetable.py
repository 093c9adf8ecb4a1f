"""When a schedule's slots fall (``engine.timetable``), with no database: cron expressions read in a
time zone across both daylight-saving changes of Europe/Paris and America/New_York (a fixed-time
expression fires once a day — at the first 02:30 in autumn, at the end of the gap in spring —; a
periodic one at every real hour or quarter), intervals in elapsed time, and each bad timing
refused naming its field."""

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workflows_app.engine import timetable
from workflows_app.errors import ParameterError

PARIS = ZoneInfo("Europe/Paris")
NEW_YORK = ZoneInfo("America/New_York")


def utc(*args):
    return datetime(*args, tzinfo=UTC)


def local(zone, *args, fold=0):
    return datetime(*args, tzinfo=zone, fold=fold).astimezone(UTC)


def slots(cron, zone, after, until):
    found = []
    for slot in timetable.slots(cron=cron, timezone=zone.key, after=after):
        if slot > until:
            return found
        found.append(slot)
    return found


# --- fixed-time expressions: once a day --------------------------------------------------------

def test_a_daily_time_in_the_spring_gap_fires_once_at_the_end_of_the_gap_in_paris():
    # 2027-03-28: at 02:00 CET the clocks go to 03:00 CEST; 02:30 does not happen that day.
    found = slots("30 2 * * *", PARIS, utc(2027, 3, 26), utc(2027, 3, 30))
    assert found == [local(PARIS, 2027, 3, 26, 2, 30), local(PARIS, 2027, 3, 27, 2, 30),
                     local(PARIS, 2027, 3, 28, 3, 0), local(PARIS, 2027, 3, 29, 2, 30)]
    assert found[2] == utc(2027, 3, 28, 1, 0)  # the first instant of summer time


def test_a_daily_time_that_happens_twice_fires_once_at_its_first_occurrence_in_paris():
    # 2027-10-31: at 03:00 CEST the clocks go back to 02:00 CET; 02:30 happens twice.
    found = slots("30 2 * * *", PARIS, utc(2027, 10, 29), utc(2027, 11, 2))
    assert found == [utc(2027, 10, 29, 0, 30), utc(2027, 10, 30, 0, 30), utc(2027, 10, 31, 0, 30),
                     utc(2027, 11, 1, 1, 30)]
    assert found[2] == local(PARIS, 2027, 10, 31, 2, 30, fold=0)


def test_a_daily_time_across_new_yorks_changes():
    # 2027-03-14: 02:00 EST -> 03:00 EDT; 2027-11-07: 02:00 EDT -> 01:00 EST (01:30 twice).
    assert slots("30 2 * * *", NEW_YORK, utc(2027, 3, 13), utc(2027, 3, 16)) == [
        utc(2027, 3, 13, 7, 30), utc(2027, 3, 14, 7, 0), utc(2027, 3, 15, 6, 30)]
    assert slots("30 1 * * *", NEW_YORK, utc(2027, 11, 6), utc(2027, 11, 9)) == [
        utc(2027, 11, 6, 5, 30), utc(2027, 11, 7, 5, 30), utc(2027, 11, 8, 6, 30)]


def test_a_gap_slot_that_falls_on_a_real_slot_fires_once():
    found = slots("0,30 2,3 * * *", PARIS, utc(2027, 3, 27, 22), utc(2027, 3, 28, 3))
    # 02:00 and 02:30 move to 03:00 CEST, which is a slot itself: one firing there.
    assert found == [local(PARIS, 2027, 3, 28, 3, 0), local(PARIS, 2027, 3, 28, 3, 30)]


@pytest.mark.parametrize("zone", [PARIS, NEW_YORK])
@pytest.mark.parametrize("cron", ["30 2 * * *", "0 2 * * *", "15 1 * * *", "45 3 * * *", "0 0 * * *"])
def test_a_fixed_time_fires_exactly_once_on_every_day_of_the_year(zone, cron):
    found = slots(cron, zone, local(zone, 2027, 1, 1), local(zone, 2028, 1, 1))
    days = [slot.astimezone(zone).date() for slot in found]
    assert len(days) == len(set(days)) == 365


# --- periodic expressions: every real hour or quarter ------------------------------------------

@pytest.mark.parametrize("zone, day", [(PARIS, (2027, 3, 28)), (PARIS, (2027, 10, 31)),
                                       (NEW_YORK, (2027, 3, 14)), (NEW_YORK, (2027, 11, 7))])
@pytest.mark.parametrize("cron, step", [("0 * * * *", 60), ("30 * * * *", 60), ("*/15 * * * *", 15)])
def test_a_periodic_expression_fires_at_every_real_step_across_the_changes(zone, day, cron, step):
    following = date(*day) + timedelta(days=1)
    start, end = local(zone, *day), local(zone, following.year, following.month, following.day)  # midnight to midnight
    hours = (end - start) // timedelta(hours=1)
    assert hours in (23, 25)  # the day of the change is one hour short, or long
    found = slots(cron, zone, start - timedelta(hours=3), end + timedelta(hours=3))
    assert {b - a for a, b in zip(found, found[1:])} == {timedelta(minutes=step)}
    assert len([slot for slot in found if start <= slot < end]) == hours * 60 // step


def test_an_hourly_expression_fires_at_both_two_oclocks_in_autumn_and_at_none_in_spring():
    autumn = slots("0 * * * *", PARIS, utc(2027, 10, 30, 23, 30), utc(2027, 10, 31, 2, 30))
    assert [slot.astimezone(PARIS).strftime("%H:%M%z") for slot in autumn] == [
        "02:00+0200", "02:00+0100", "03:00+0100"]
    spring = slots("0 * * * *", PARIS, utc(2027, 3, 27, 23, 30), utc(2027, 3, 28, 2, 30))
    assert [slot.astimezone(PARIS).strftime("%H:%M%z") for slot in spring] == [
        "01:00+0100", "03:00+0200", "04:00+0200"]


def test_next_slot_from_inside_the_repeated_hour_finds_the_second_pass():
    # 02:50 CEST: the next hourly slot is 02:00 CET (one wall-clock reading earlier).
    assert timetable.next_slot(cron="0 * * * *", timezone="Europe/Paris", after=utc(2027, 10, 31, 0, 50)) \
        == utc(2027, 10, 31, 1, 0)
    assert timetable.next_slot(cron="30 2 * * *", timezone="Europe/Paris", after=utc(2027, 10, 31, 0, 50)) \
        == utc(2027, 11, 1, 1, 30)


def test_which_expressions_are_periodic():
    assert all(timetable.is_periodic(cron) for cron in ["* * * * *", "0 * * * *", "*/15 9 * * *", "0 */2 * * *",
                                                         "0 0-23 * * *", "@hourly"])
    assert not any(timetable.is_periodic(cron) for cron in ["30 2 * * *", "0 1-5 * * *", "@daily", "0 9 * * mon-fri"])


@settings(max_examples=60, deadline=None)
@given(cron=st.sampled_from(["*/7 * * * *", "0 * * * *", "30 2 * * *", "0 0 L * *", "5 4 * * L5", "0 12 1,15 * *",
                             "0,30 1-3 * * *"]),
       zone=st.sampled_from(["Europe/Paris", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "UTC"]),
       after=st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1)).map(lambda d: d.replace(tzinfo=UTC)))
def test_slots_are_later_than_after_strictly_increasing_and_next_slot_agrees(cron, zone, after):
    found = [slot for _, slot in zip(range(6), timetable.slots(cron=cron, timezone=zone, after=after))]
    assert len(found) == 6
    assert after < found[0] and all(a < b for a, b in zip(found, found[1:]))
    for previous, slot in zip([after, *found], found):
        assert timetable.next_slot(cron=cron, timezone=zone, after=previous) == slot
        assert slot.tzinfo is UTC and slot.second == 0


# --- intervals: elapsed seconds ----------------------------------------------------------------

def test_an_interval_counts_elapsed_time_across_the_changes():
    anchor = utc(2027, 3, 27, 12, 0, 0, 250_000)
    found = [slot for _, slot in zip(range(30), timetable.slots(interval=3600, after=anchor, anchor=anchor))]
    assert found[0] == anchor + timedelta(hours=1)
    assert {b - a for a, b in zip(found, found[1:])} == {timedelta(hours=1)}
    assert all(slot.microsecond == 250_000 for slot in found)


def test_an_interval_slot_falls_on_the_anchor_grid_from_any_time():
    anchor = utc(2027, 1, 1, 0, 0, 10)
    assert timetable.next_slot(interval=60, after=utc(2027, 1, 1, 5, 0, 10), anchor=anchor) == utc(2027, 1, 1, 5, 1, 10)
    assert timetable.next_slot(interval=60, after=utc(2027, 1, 1, 5, 0, 9), anchor=anchor) == utc(2027, 1, 1, 5, 0, 10)
    assert timetable.next_slot(interval=60, after=utc(2026, 12, 31, 23, 0), anchor=anchor) == utc(2026, 12, 31, 23, 0, 10)
    assert timetable.next_slot(interval=60, after=utc(2027, 1, 1, 0, 0, 30)) == utc(2027, 1, 1, 0, 1)  # epoch grid


def test_count_of_a_week_of_minutes():
    after, until = utc(2027, 1, 1), utc(2027, 1, 8)
    assert timetable.count(interval=60, after=after, until=until) == (10_080, utc(2027, 1, 1, 0, 1), until)
    assert timetable.count(cron="* * * * *", after=after, until=until) == (10_080, utc(2027, 1, 1, 0, 1), until)
    assert timetable.count(interval=60, after=after, until=after + timedelta(seconds=59)) == (0, None, None)
    # Across the autumn change, a periodic expression counts the real hours: 25.
    assert timetable.count(cron="0 * * * *", timezone="Europe/Paris", after=local(PARIS, 2027, 10, 31) - timedelta(seconds=1),
                           until=local(PARIS, 2027, 11, 1) - timedelta(seconds=1))[0] == 25


def test_an_expression_with_no_later_match_has_no_next_slot():
    assert timetable.next_slot(cron="0 0 29 2 *", after=utc(9999, 3, 1)) is None


# --- bad timings, each named ---------------------------------------------------------------------

@pytest.mark.parametrize("timing, message", [
    ({}, "cron, interval: a schedule needs a cron expression or an interval"),
    ({"cron": "* * * * *", "interval": 60}, "cron, interval: give a cron expression or an interval, not both"),
    ({"cron": 5}, "cron must be a string, not int"),
    ({"cron": "* * * *"}, "cron: '* * * *' has 4 fields, not the five"),
    ({"cron": "* * * * * *"}, "cron: '* * * * * *' has 6 fields"),
    ({"cron": "61 * * * *"}, "cron: the minute field '61' is not valid (it takes 0-59)"),
    ({"cron": "*/0 * * * *"}, "cron: the minute field '*/0' is not valid"),
    ({"cron": "0 24 * * *"}, "cron: the hour field '24' is not valid (it takes 0-23)"),
    ({"cron": "0 0 0 * *"}, "cron: the day of month field '0' is not valid (it takes 1-31 or L)"),
    ({"cron": "0 0 1W * *"}, "cron: the day of month field '1W' is not valid"),
    ({"cron": "0 0 ? * *"}, "cron: the day of month field '?' is not valid"),
    ({"cron": "0 0 * 13 *"}, "cron: the month field '13' is not valid (it takes 1-12 or jan-dec)"),
    ({"cron": "0 0 * foo *"}, "cron: the month field 'foo' is not valid"),
    ({"cron": "0 0 * * 8"}, "cron: the day of week field '8' is not valid (it takes 0-7 or sun-sat"),
    ({"cron": "0 0 * * 5#6"}, "cron: the day of week field '5#6' is not valid"),
    ({"cron": "H * * * *"}, "cron: the minute field 'H' is not valid"),  # hashed: not cron
    ({"cron": "R * * * *"}, "cron: the minute field 'R' is not valid"),  # random: managers would disagree
    ({"cron": "@reboot"}, "cron: '@reboot' is not a nickname cron knows"),
    ({"cron": "0 0 30 2 *"}, "cron: '0 0 30 2 *' never fires"),
    ({"cron": "0 0 * * *\x00"}, "cron: null characters (\\u0000) are not allowed"),
    ({"cron": "0 0 * * *\ud800"}, "cron: lone surrogates"),
    ({"cron": "0 " * 200}, "cron: longer than 255 characters"),
    ({"interval": 0}, "interval must be from 1 to 315360000 seconds, not 0"),
    ({"interval": -5}, "interval must be from 1 to"),
    ({"interval": timetable.MAX_INTERVAL + 1}, "interval must be from 1 to"),
    ({"interval": 1.5}, "interval must be a whole number of seconds, not 1.5"),
    ({"interval": float("nan")}, "interval must be a whole number of seconds, not nan"),
    ({"interval": True}, "interval must be a whole number of seconds, not True"),
    ({"interval": "60"}, "interval must be a whole number of seconds, not '60'"),
    ({"interval": 60, "timezone": "Mars/Olympus"}, "timezone: 'Mars/Olympus' is not a known time zone"),
    ({"interval": 60, "timezone": "../../etc/passwd"}, "is not a known time zone"),
    ({"interval": 60, "timezone": "Europe"}, "timezone: 'Europe' is not a known time zone"),
    ({"interval": 60, "timezone": ""}, "timezone must be a time zone name of 1 to 64 characters"),
    ({"interval": 60, "timezone": "x" * 65}, "timezone must be a time zone name of 1 to 64 characters"),
    ({"interval": 60, "timezone": None}, "timezone must be a string, not NoneType"),
    ({"interval": 60, "timezone": "UTC\x00"}, "timezone: null characters"),
    ({"interval": 60, "timezone": "\udc80"}, "timezone: lone surrogates"),
])
def test_a_bad_timing_is_refused_naming_its_field(timing, message):
    with pytest.raises(ParameterError) as refused:
        timetable.check(**timing)
    assert message in str(refused.value)


@pytest.mark.parametrize("timing", [
    {"cron": "*/5 * * * *"}, {"cron": "0 9 * * mon-fri", "timezone": "Europe/Paris"}, {"cron": "@daily"},
    {"cron": "0 0 L * *"}, {"cron": "0 0 * * L5"}, {"cron": "0 0 * * 5#2"}, {"cron": "0 0 29 2 *"},
    {"cron": "0 0 * JAN,mar *", "timezone": "America/New_York"}, {"interval": 1}, {"interval": timetable.MAX_INTERVAL},
    {"cron": None, "interval": 30},
])
def test_a_good_timing_passes(timing):
    assert timetable.check(**timing) is None
