"""When a schedule's slots fall: pure logic, no database.

A schedule has a cron expression read in a time zone, or an interval.

**An interval** of ``n`` seconds is elapsed time: its slots fall on ``anchor + k * n`` (the
anchor is the schedule's creation time), whatever the clocks on the wall say. Daylight saving
changes do not move them: an interval of 3600 s fires every real hour, 24 times on every day.

**A cron expression** has five fields, ``minute hour day-of-month month day-of-week``, read as
Vixie cron reads them (``*``, ``*/15``, ``1-5``, ``1,15``, ``jan``-``dec``, ``sun``-``sat``, 0 or
7 for Sunday; a day matches when the day of month *or* the day of week matches if both are
restricted; ``L`` for the last day of the month, ``L5`` for the last Friday, ``5#2`` for the
second Friday; ``@hourly``, ``@daily``/``@midnight``, ``@weekly``, ``@monthly``,
``@yearly``/``@annually``). Its slots are wall-clock times in the schedule's time zone, and twice a
year a daylight-saving change makes some wall-clock times happen twice or not at all. The rule,
the one Vixie cron follows:

- *Fixed-time* expressions — a fixed minute and hour such as ``30 2 * * *`` — name times of the
  day; each fires **once** on each day it names:

  - a time that happens twice (autumn, when the clocks go back: 02:30 on Europe/Paris' last
    Sunday of October) fires at its **first** occurrence only;
  - a time that does not happen (spring, when the clocks go forward: 02:30 on Europe/Paris' last
    Sunday of March) fires at the **first instant after the gap** (03:00, summer time); when the
    expression has a slot at that instant anyway (``0,30 2,3 * * *``), it fires once there.

- *Periodic* expressions — those written with ``*`` in the minute or hour field (``0 * * * *``,
  ``*/15 * * * *``, ``0 */2 * * *``), or whose minute or hour field names every value — name a
  rhythm: they fire at **every real instant** whose wall-clock reading matches. An hourly
  schedule fires every real hour, so twice at 02:00 on the autumn day (the hour happens twice)
  and not at 02:00 on the spring day (that hour does not happen): 23, 24 or 25 runs a day,
  one hour apart, always. Every 15 minutes stays every 15 minutes.

Slots are at whole minutes of the wall clock; within the same time zone without a daylight-
saving change, the two rules agree.
"""

import functools
import heapq
import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterError, croniter

from workflows_app import values
from workflows_app.errors import ParameterError

#: Longest interval, in seconds (ten years).
MAX_INTERVAL = 10 * 365 * 24 * 3600
#: Longest cron expression and time zone name (what the schedule's columns hold).
MAX_CRON = 255
MAX_TIMEZONE = 64

#: The nicknames an expression may be, and the five fields each stands for.
NICKNAMES = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
             "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}

_MONTHS = "jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec"
_DAYS = "sun|mon|tue|wed|thu|fri|sat"
# The five fields: name, what it takes (for messages), and the characters it is written with. The
# cron library knows more (hashed "H", random "R", "W", "?", seconds and years): refused, for a
# random slot would differ from one manager to the next and the others are not cron.
_FIELDS = (
    ("minute", "0-59", re.compile(r"[0-9*,/-]+")),
    ("hour", "0-23", re.compile(r"[0-9*,/-]+")),
    ("day of month", "1-31 or L", re.compile(r"(?:[0-9*,/-]|L)+", re.IGNORECASE)),
    ("month", "1-12 or jan-dec", re.compile(rf"(?:[0-9*,/-]|{_MONTHS})+", re.IGNORECASE)),
    ("day of week", "0-7 or sun-sat, with L5 or 5#2", re.compile(rf"(?:[0-9*,/#-]|L|{_DAYS})+", re.IGNORECASE)),
)
# A reference time to check that an expression fires at all (30 February never comes).
_REFERENCE = datetime(2000, 1, 1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def check(cron="", interval=None, timezone="UTC"):
    """Raise ``ParameterError`` naming what is wrong with a schedule's timing: exactly one of a
    cron expression (five fields, each within its range, one that fires at some time) and an
    interval (whole seconds, from 1 to :data:`MAX_INTERVAL`); a time zone that ``zoneinfo``
    knows (``Europe/Paris``, ``UTC``). ``cron`` None is no cron expression."""
    cron = "" if cron is None else cron
    if not isinstance(cron, str):
        raise ParameterError(f"cron must be a string, not {type(cron).__name__}")
    if interval is not None and (isinstance(interval, bool) or not isinstance(interval, int)):
        raise ParameterError(f"interval must be a whole number of seconds, not {_shown(interval)}")
    if cron and interval is not None:
        raise ParameterError("cron, interval: give a cron expression or an interval, not both")
    if not cron and interval is None:
        raise ParameterError("cron, interval: a schedule needs a cron expression or an interval")
    if interval is not None and not 1 <= interval <= MAX_INTERVAL:
        raise ParameterError(f"interval must be from 1 to {MAX_INTERVAL} seconds, not {interval}")
    zone(timezone)
    if cron:
        _parse(cron)


def zone(name) -> ZoneInfo:
    """The time zone called ``name``; ``ParameterError`` naming ``timezone`` if there is none."""
    if not isinstance(name, str):
        raise ParameterError(f"timezone must be a string, not {type(name).__name__}")
    problem = values.string_problem(name)
    if problem:
        raise ParameterError(f"timezone: {problem}")
    if not name or len(name) > MAX_TIMEZONE:
        raise ParameterError(f"timezone must be a time zone name of 1 to {MAX_TIMEZONE} characters "
                             "such as Europe/Paris or UTC")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        # ValueError: a name that is a path ("../etc"); OSError: one that names a directory.
        raise ParameterError(f"timezone: {_shown(name)} is not a known time zone (an IANA name such as "
                             "Europe/Paris or UTC)") from None


def is_periodic(cron) -> bool:
    """Whether the expression is *periodic* (fires at every real instant that matches) rather
    than *fixed-time* (fires once per wall-clock time it names): see the module's rule."""
    fields, expanded = _parse(cron)
    # The cron library expands a full range ("0-23") to "*".
    return (fields[0].startswith("*") or fields[1].startswith("*")
            or expanded[0] == ("*",) or expanded[1] == ("*",) or len(expanded[0]) == 60 or len(expanded[1]) == 24)


def next_slot(*, cron="", interval=None, timezone="UTC", after, anchor=None):
    """The first slot strictly later than ``after`` (an aware datetime), as an aware datetime in
    UTC; None if there is none (a cron expression whose next match is beyond the year 9999).
    ``anchor``: for an interval, a time the slots fall on (anchor + k * interval; by default
    1970-01-01 UTC)."""
    return next(slots(cron=cron, interval=interval, timezone=timezone, after=after, anchor=anchor), None)


def slots(*, cron="", interval=None, timezone="UTC", after, anchor=None):
    """The slots strictly later than ``after``, in order, as aware datetimes in UTC (a generator,
    endless for an interval)."""
    _aware(after, "after")
    if interval is not None:
        anchor = _EPOCH if anchor is None else _aware(anchor, "anchor")
        return _interval_slots(interval, after, anchor)
    return _cron_slots(cron, zone(timezone), after)


def count(*, cron="", interval=None, timezone="UTC", after, until, anchor=None):
    """``(number, first, last)`` of the slots later than ``after`` and not later than ``until``
    (``(0, None, None)`` if none). An interval's are counted by arithmetic, in constant time."""
    _aware(until, "until")
    if interval is not None:
        first = next_slot(interval=interval, after=after, anchor=anchor)
        if first is None or first > until:
            return 0, None, None
        step = timedelta(seconds=interval)
        number = (until - first) // step + 1
        return number, first, first + (number - 1) * step
    number, first, last = 0, None, None
    for slot in slots(cron=cron, timezone=timezone, after=after):
        if slot > until:
            break
        number, first, last = number + 1, first or slot, slot
    return number, first, last


def _interval_slots(interval, after, anchor):
    step = timedelta(seconds=interval)
    try:
        slot = anchor + ((after - anchor) // step + 1) * step  # floor division: right before the anchor too
        while True:
            yield slot.astimezone(UTC)
            slot += step
    except OverflowError:  # beyond the year 9999
        return


def _cron_slots(cron, tz, after):
    """The expression's wall-clock times, iterated as naive times of ``tz``, each made a real
    instant (none, one or two) by the module's rule, merged in order.

    The instants of successive wall-clock times are not always in order: in the hour that
    happens twice, 02:15 (second pass) comes after 02:45 (first pass). So the instants wait in a
    heap until no later wall-clock time can give an earlier one."""
    fields, _ = _parse(cron)
    periodic = is_periodic(cron)
    after = after.astimezone(UTC)
    # Start where a wall-clock time may give an instant after ``after``: its own reading, or an
    # earlier one if the clocks go back within the next day (the repeated hour's second pass
    # reads earlier than ``after`` did).
    lowest = min(_offset(after, tz), _offset(after + timedelta(days=1), tz))
    start = (after + lowest).replace(tzinfo=None) - timedelta(minutes=1)
    walls = croniter(" ".join(fields), start)
    waiting, last = [], None
    while True:
        try:
            wall = walls.get_next(datetime)
        except (CroniterBadDateError, OverflowError, ValueError):
            wall = None
        if wall is not None:
            for instant in _instants(wall, tz, periodic):
                if instant > after:
                    heapq.heappush(waiting, instant)
        # The earliest waiting instant is final once wall-clock times have passed its reading in
        # the highest offset it may have been read with.
        while waiting and (wall is None or wall >= _reading_bound(waiting[0], tz)):
            instant = heapq.heappop(waiting)
            if instant != last:  # a slot moved out of a gap onto another slot: once
                last = instant
                yield instant
        if wall is None:
            return


def _reading_bound(instant, tz):
    highest = max(_offset(instant, tz), _offset(instant - timedelta(days=1), tz))
    return (instant + highest).replace(tzinfo=None)


def _instants(wall, tz, periodic):
    """The real instants (UTC) at which the naive wall-clock time ``wall`` of ``tz`` fires."""
    first = wall.replace(tzinfo=tz).astimezone(UTC)            # fold=0: the earlier offset
    second = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)   # fold=1: the later offset
    if first == second:
        return (first,)
    if first < second:  # the clocks went back: the time happens twice
        return (first, second) if periodic else (first,)
    # The clocks went forward over it: it does not happen. (PEP 495: fold=0 reads it with the
    # offset before the gap, which gives the later instant.)
    return () if periodic else (_gap_end(wall, tz, second, first),)


def _gap_end(wall, tz, low, high):
    """The first instant whose reading in ``tz`` is later than ``wall`` (a time in a gap),
    between ``low`` (before the gap) and ``high`` (after it), to the second (transitions are)."""
    low, high = int(low.timestamp()), int(high.timestamp())
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, tz).replace(tzinfo=None) > wall:
            high = middle
        else:
            low = middle
    return datetime.fromtimestamp(high, UTC)


def _offset(instant, tz):
    try:
        return instant.astimezone(tz).utcoffset()
    except OverflowError:
        return timedelta(0)


def _parse(cron):
    """``(fields, expanded)`` of a valid expression; else ``ParameterError`` saying which field
    is wrong."""
    if not isinstance(cron, str):
        raise ParameterError(f"cron must be a string, not {type(cron).__name__}")
    problem = values.string_problem(cron)
    if problem:
        raise ParameterError(f"cron: {problem}")
    if len(cron) > MAX_CRON:
        raise ParameterError(f"cron: longer than {MAX_CRON} characters")
    return _parse_text(cron)


@functools.lru_cache(maxsize=256)
def _parse_text(cron):
    text = cron.strip()
    text = NICKNAMES.get(text.lower(), text)
    if text.startswith("@"):
        raise ParameterError(f"cron: {_shown(cron)} is not a nickname cron knows ({', '.join(NICKNAMES)})")
    fields = text.split()
    if len(fields) != 5:
        raise ParameterError(f"cron: {_shown(cron)} has {len(fields)} fields, not the five of "
                             "'minute hour day-of-month month day-of-week'")
    for position, (field, (name, takes, allowed)) in enumerate(zip(fields, _FIELDS)):
        alone = " ".join(field if index == position else "*" for index in range(5))
        if not allowed.fullmatch(field) or not croniter.is_valid(alone):
            raise ParameterError(f"cron: the {name} field {_shown(field)} is not valid (it takes {takes})")
    try:
        expanded = croniter(text, _REFERENCE).expanded
        croniter(text, _REFERENCE).get_next(datetime)
    except CroniterBadDateError:
        raise ParameterError(f"cron: {_shown(cron)} never fires (no date matches it)") from None
    except (CroniterBadCronError, CroniterError, ValueError, KeyError) as error:
        raise ParameterError(f"cron: {_shown(cron)} is not valid ({error})") from None
    return tuple(fields), tuple(tuple(each) for each in expanded)


def _aware(moment, name):
    if not isinstance(moment, datetime) or moment.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, not {moment!r}")
    return moment


def _shown(value):
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- how close two slots can be ------------------------------------------------------------------

#: How far ahead :func:`closest_slots` looks for the daylight-saving changes of a time zone, and
#: for two consecutive days a cron expression's day fields both match.
DST_HORIZON = timedelta(days=366)
CONSECUTIVE_DAYS_HORIZON = timedelta(days=4 * 366)


def closest_slots(cron, timezone, minimum, now) -> tuple[int | None, str]:
    """``(seconds, where)`` of two consecutive slots of the cron expression less than ``minimum``
    seconds apart, ``where`` saying when if only on a daylight-saving change; ``(None, "")`` if
    none is found. Its slots are compared as the wall clock reads them, whatever the day (the
    minute and hour fields name the times of every day it fires; the last of a day and the first
    of the next when its day fields match two consecutive days within CONSECUTIVE_DAYS_HORIZON of
    ``now``), and as real instants around each daylight-saving change of its time zone within
    DST_HORIZON of ``now`` (a change moves some slots nearer each other)."""
    if minimum <= 60:
        return None, ""  # slots are whole minutes apart
    text = cron.strip()
    fields = NICKNAMES.get(text.lower(), text).split()
    minutes, hours = croniter(" ".join(fields), datetime(2000, 1, 1)).expanded[:2]
    minutes = range(60) if minutes == ["*"] else minutes
    hours = range(24) if hours == ["*"] else hours
    times = sorted({hour * 60 + minute for hour in hours for minute in minutes})  # minutes of a day
    gaps = [(later - earlier) * 60 for earlier, later in zip(times, times[1:])]
    if gaps and min(gaps) < minimum:
        return min(gaps), ""
    overnight = (24 * 60 - times[-1] + times[0]) * 60
    if overnight < minimum and _consecutive_days(fields[2:], now):
        return overnight, ""
    tz = zone(timezone)
    for change in _offset_changes(tz, now, now + DST_HORIZON):
        window = timedelta(seconds=minimum + 60)
        previous = None
        for slot in slots(cron=cron, timezone=timezone, after=change - window):
            if slot > change + window:
                break
            if previous is not None and (slot - previous).total_seconds() < minimum:
                return int((slot - previous).total_seconds()), (
                    f" on {slot.astimezone(tz):%Y-%m-%d}, a daylight-saving change in {timezone}")
            previous = slot
    return None, ""


def _consecutive_days(day_fields, now) -> bool:
    """Whether the day fields (day of month, month, day of week) match two consecutive days
    within CONSECUTIVE_DAYS_HORIZON of ``now``."""
    start = now.replace(tzinfo=None)
    days = croniter(f"0 0 {' '.join(day_fields)}", start)
    previous = None
    while True:
        try:
            day = days.get_next(datetime)
        except (ValueError, OverflowError, CroniterBadDateError):
            return False
        if day - start > CONSECUTIVE_DAYS_HORIZON:
            return False
        if previous is not None and day - previous == timedelta(days=1):
            return True
        previous = day


def _offset_changes(tz, start, end):
    """The instants (to the second) between ``start`` and ``end`` at which ``tz``'s offset
    from UTC changes."""
    moment = start
    while moment < end:
        following = moment + timedelta(days=1)
        if moment.astimezone(tz).utcoffset() != following.astimezone(tz).utcoffset():
            low, high = moment, following
            while high - low > timedelta(seconds=1):
                middle = low + (high - low) / 2
                if middle.astimezone(tz).utcoffset() == low.astimezone(tz).utcoffset():
                    low = middle
                else:
                    high = middle
            yield high
        moment = following
