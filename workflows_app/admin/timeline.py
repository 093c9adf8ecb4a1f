"""The timeline of an execution's page: where the time went, one bar per attempt.

Each attempt of a step is a bar from when it was sent (its ``task_sending`` event) to when it
ended — succeeded, failed, rescheduled (it will be retried), cancelled — or, while it has not
ended, to now: ``running`` once an agent started it, ``waiting`` (to start) before. The part of
a bar before its start is the time it waited in its agent's queue. A step's attempts share its
row; a fan-out (``picture.groups``: the siblings the graph draws as one box) is one row whose
attempts are packed into lanes, so that 1,000 attempts read as one row, opened on demand.

Where the times come from: an operation's row keeps only its current attempt's times, while
every move of every attempt wrote an event (``task_sending`` … ``task_cancelled``, each with
``data.attempt``) in the transaction of the move. One aggregate query over the execution's
events folds them into one row per attempt — the earliest moment of each kind, the agent that
started it, the type of the error it ended with — so the database sends one row per attempt
however many events there are, and never a traceback. Beyond ``ATTEMPT_LIMIT`` attempts the
timeline is not drawn.

:func:`of` builds the page's JSON (``ExecutionAdmin``'s ``timeline/`` URL, the graph's check of
who may view it); :func:`bars`, :func:`rows` and :func:`lanes` are pure, from rows to bars.
"""

from django.db.models import IntegerField, Max, Min, Q
from django.db.models.fields.json import KT
from django.db.models.functions import Cast
from django.http import JsonResponse
from django.utils import timezone

from workflows_app import clock, queries
from workflows_app.admin import picture
from workflows_app.models import Event, Operation
from workflows_app.states import EventType, OperationState

#: Attempts beyond which the timeline is not drawn: its JSON would be too large to send again
#: every few seconds.
ATTEMPT_LIMIT = 5000
#: The most lanes a group's row packs its attempts into; more at once share the lanes.
MAX_LANES = 12

SUCCEEDED, FAILED, RESCHEDULED, CANCELLED, RUNNING, WAITING = (
    "succeeded", "failed", "rescheduled", "cancelled", "running", "waiting")
#: The outcomes of a bar, in the legend's order.
OUTCOMES = (SUCCEEDED, FAILED, RESCHEDULED, CANCELLED, RUNNING, WAITING)

#: The moments of an attempt: the name the aggregate gives each, and the event that marks it.
#: ``reset`` is a resume's move back to pending (a ``log`` event with ``from`` and ``to``):
#: it ends an attempt that a force-resume sends again.
_RESET = Q(type=EventType.LOG, data__to=OperationState.PENDING.value, data__has_key="from")
MOMENTS = {
    "sending": Q(type=EventType.TASK_SENDING),
    "sent": Q(type=EventType.TASK_SENT),
    "started": Q(type=EventType.TASK_STARTED),
    SUCCEEDED: Q(type=EventType.TASK_SUCCEEDED),
    FAILED: Q(type=EventType.TASK_FAILED),
    RESCHEDULED: Q(type=EventType.TASK_RESCHEDULED),
    CANCELLED: Q(type=EventType.TASK_CANCELLED),
    "reset": _RESET,
}
#: The moments that end an attempt; of two (a rescheduled attempt cancelled while it waited for
#: its retry), the first is how the attempt ended.
ENDS = (SUCCEEDED, FAILED, RESCHEDULED, CANCELLED, "reset")
TASK_EVENTS = (EventType.TASK_SENDING, EventType.TASK_SENT, EventType.TASK_STARTED, EventType.TASK_SUCCEEDED,
               EventType.TASK_FAILED, EventType.TASK_RESCHEDULED, EventType.TASK_CANCELLED)


# --- reading ---------------------------------------------------------------------------------

def attempt_rows(execution_id, limit=ATTEMPT_LIMIT) -> list[dict]:
    """One row per (step, attempt) of the execution, at most ``limit + 1``: ``operation`` (the
    step's name), ``attempt``, the first time of each of ``MOMENTS`` (or None), ``agent`` (that
    started it) and ``error`` (the type of the error it failed or was rescheduled with). One
    query; an attempt 0 (a step cancelled before it was ever sent, or kept by a rerun) is one too."""
    return list(
        Event.objects.filter(Q(execution_id=execution_id), Q(type__in=TASK_EVENTS) | _RESET)
        .values("operation", attempt=Cast(KT("data__attempt"), IntegerField()))
        .annotate(**{name: Min("timestamp", filter=moment) for name, moment in MOMENTS.items()},
                  agent=Max(KT("data__agent"), filter=MOMENTS["started"]),
                  error=Max(KT("data__error__type"), filter=MOMENTS[FAILED] | MOMENTS[RESCHEDULED]))
        .order_by()[:limit + 1])


# --- from rows to bars (pure) -------------------------------------------------------------------

def bars(rows) -> list[dict]:
    """The bars of ``attempt_rows``: ``{"step", "attempt", "agent", "sent", "started", "ended",
    "outcome", "error", "reset"}`` (times as read; ``started`` None before an agent started it,
    ``ended`` None while it has not ended), ordered by step and attempt. A row of an attempt
    that was never sent is no bar."""
    found = []
    for row in rows:
        sent = row.get("sending") or row.get("sent") or row.get("started")
        if not row.get("attempt") or sent is None:
            continue
        ends = sorted((row[name], name) for name in ENDS if row.get(name) is not None)
        ended, how = ends[0] if ends else (None, None)
        if how == "reset":
            outcome = CANCELLED  # a force-resume took it back: it was sent again as a new attempt
        elif how:
            outcome = how
        else:
            outcome = RUNNING if row.get("started") else WAITING
        found.append({"step": row["operation"], "attempt": row["attempt"], "agent": row.get("agent"), "sent": sent,
                      "started": row.get("started"), "ended": ended, "outcome": outcome,
                      "error": row.get("error") if outcome in (FAILED, RESCHEDULED) else None,
                      "reset": how == "reset"})
    return sorted(found, key=lambda bar: (bar["step"] or "", bar["attempt"]))


def lanes(members_bars, until, most=MAX_LANES) -> int:
    """Give each bar of a group a ``lane``; returns the number of lanes. A bar that started runs
    in the first lane whose last run ended before it began, else a new one; past ``most`` lanes,
    the one that is free first (runs then overlap). Packed by their runs — the members of a
    fan-out are sent at once and wait in their queues for the agents' processes — the lanes are
    those processes. The bars that never started (waiting, or stopped before they started) share
    one lane below: the queue. ``until``: where a bar that has not ended ends."""
    free_at, queued = [], []
    for bar in sorted(members_bars, key=lambda b: (b["started"] or b["sent"], b["step"] or "", b["attempt"])):
        if bar["started"] is None:
            queued.append(bar)
            continue
        end, began = bar["ended"] or until, bar["started"]
        lane = next((i for i, at in enumerate(free_at) if at <= began), None)
        if lane is None and len(free_at) < most:
            lane = len(free_at)
            free_at.append(end)
        elif lane is None:
            lane = min(range(len(free_at)), key=free_at.__getitem__)
        free_at[lane] = max(free_at[lane], end)
        bar["lane"] = lane
    for bar in queued:
        bar["lane"] = len(free_at)
    return len(free_at) + (1 if queued else 0)


def rows(all_bars, steps, groups, until) -> list[dict]:
    """The timeline's rows: one per step — ``{"name", "state", "operation", "agent", "local",
    "bars"}`` (``local``: a local step, run inside the manager's pass), for each of ``steps``
    (the graph's nodes) and each step a bar names — with the members of each of ``groups``
    (``picture.groups``) gathered in one ``{"group", "label", "operation", "lanes",
    "members"}``. Ordered by when their first attempt was sent; the steps never sent
    last, by name."""
    by_step = {}
    for bar in all_bars:
        by_step.setdefault(bar["step"], []).append(bar)
    step_rows = {step["name"]: {"name": step["name"], "state": step.get("state"), "operation": step.get("operation"),
                                "agent": step.get("agent"), "local": bool(step.get("local")),
                                "bars": by_step.get(step["name"], [])}
                 for step in steps}
    for name, found in by_step.items():
        step_rows.setdefault(name, {"name": name, "state": None, "operation": None, "agent": None, "local": False,
                                    "bars": found})
    shown = []
    for group in groups:
        members = [step_rows.pop(name) for name in group["members"] if name in step_rows]
        if not members:
            continue
        members.sort(key=_order)
        count = lanes([bar for member in members for bar in member["bars"]], until)
        shown.append({"group": group["members"][0], "operation": group["operation"], "lanes": count,
                      "label": f"{group['members'][0]} \u2026 {group['members'][-1]} \u00b7 {len(members)} steps",
                      "members": members})
    shown.extend(step_rows.values())
    return sorted(shown, key=lambda row: _order(row["members"][0] if "members" in row else row))


def _order(row):
    first = min((bar["sent"] for bar in row["bars"]), default=None)
    return (first is None, first or 0, picture.natural_key(row["name"]))


# --- the page's JSON ------------------------------------------------------------------------------

def of(execution, now=None) -> dict:
    """The timeline of ``execution`` as the page's script draws it. Times are seconds from
    ``origin`` (the execution's start, or its first attempt if earlier), to the millisecond.
    Queries: the number of operations, the graph (two, or three with child workflows: where
    the groups are and which steps never ran) while it has at most ``picture.READ_LIMIT``
    operations, and the attempts — whatever their number."""
    now = now or clock.now()
    active = not execution.is_terminal
    head = {"status": execution.status, "active": active, "limit": ATTEMPT_LIMIT}
    read = attempt_rows(execution.pk)
    if len(read) > ATTEMPT_LIMIT:
        return {**head, "too_large": True, "rows": []}
    total = Operation.objects.filter(execution_id=execution.pk).count()
    steps, groups = [], []
    if total <= picture.READ_LIMIT:
        graph = queries.graph(execution.pk)
        steps, groups = graph["nodes"], picture.groups(graph)
    found = bars(read)
    until = now if active or execution.ended_at is None else execution.ended_at
    origin = min([bar["sent"] for bar in found] + [execution.started_at or execution.created_at or now])
    shown = rows(found, steps, groups, until)
    local = timezone.localtime(origin)
    return {**head, "too_large": False, "attempts": len(found), "steps": max(total, len(shown)),
            "origin": local.isoformat(), "tz_offset": local.utcoffset().total_seconds(),
            "until": _seconds(until, origin),
            "ended": _seconds(execution.ended_at, origin) if execution.ended_at and not active else None,
            "rows": [_row_json(row, origin) for row in shown]}


def _seconds(moment, origin):
    return None if moment is None else round((moment - origin).total_seconds(), 3)


def _row_json(row, origin):
    if "members" in row:
        return {"group": row["group"], "label": row["label"], "operation": row["operation"], "lanes": row["lanes"],
                "members": [_row_json(member, origin) for member in row["members"]]}
    out = {"name": row["name"], "state": row["state"], "operation": row["operation"], "agent": row["agent"],
           "bars": [_bar_json(bar, origin) for bar in row["bars"]]}
    if row.get("local"):
        out["local"] = True  # left out when false, as a bar's empty fields are
    return out


def _bar_json(bar, origin):
    """A bar, its empty fields left out (a timeline of 1,000 attempts is sent every few seconds)."""
    out = {"attempt": bar["attempt"], "outcome": bar["outcome"], "start": _seconds(bar["sent"], origin)}
    for key, value in (("run", _seconds(bar["started"], origin)), ("end", _seconds(bar["ended"], origin)),
                       ("agent", bar["agent"]), ("error", bar["error"]), ("lane", bar.get("lane")),
                       ("reset", bar["reset"] or None)):
        if value is not None:
            out[key] = value
    return out


def view(model_admin, request, object_id):
    """``timeline/`` of an execution's page: its JSON, to who may view the execution (else a 404,
    as the graph's)."""
    execution = model_admin.get_object(request, object_id)
    if execution is None or not model_admin.has_view_permission(request, execution):
        return JsonResponse({"error_code": "not_found", "message": f"no execution {object_id!r}"}, status=404)
    return JsonResponse(of(execution))
