"""The timeline of an execution's page (``workflows_app.admin.timeline``): the bars built from
the attempts' rows (retries, a running attempt, a waiting one, cancelled ones, a step never sent,
a fan-out of 1,000 packed in lanes), the aggregate read from the events the transitions write,
and the page: the timeline's box, its JSON refused to who may not view the execution, and a
constant number of queries for 10 attempts and for 1,000.

``fan_out`` stores an execution of a fan-out with its whole event history in bulk (the browser
test draws it too)."""

import heapq
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from tests.api.conftest import GUARDED, VIEWER, make_user, register_guarded
from workflows_app import clock
from workflows_app.admin import timeline
from workflows_app.models import Event, Execution, Operation, OperationDependency
from workflows_app.states import ExecutionStatus, OperationState
from workflows_app.transitions import operation_transition

T0 = timezone.make_aware(timezone.datetime(2026, 3, 1, 12, 0, 0))


def at(seconds):
    return T0 + timedelta(seconds=seconds)


def row(step, attempt, **moments):
    """An attempt row as ``timeline.attempt_rows`` reads it: ``moments`` in seconds after T0."""
    found = {"operation": step, "attempt": attempt, "agent": moments.pop("agent", None),
             "error": moments.pop("error", None)}
    found.update({name: None for name in timeline.MOMENTS})
    found.update({name: at(value) for name, value in moments.items()})
    return found


def timeline_url(execution):
    return reverse("admin:workflows_app_execution_timeline", args=[execution.pk])


# --- from rows to bars ---------------------------------------------------------------------------

def test_an_attempt_with_retries_is_a_bar_per_attempt_with_its_outcome_and_error():
    found = timeline.bars([
        row("flaky", 2, sending=2.0, sent=2.01, started=2.2, agent="host-1", succeeded=3.0),
        row("flaky", 1, sending=0.0, sent=0.01, started=0.5, agent="host-2", rescheduled=1.0, error="WorkerLost"),
    ])
    assert [(bar["attempt"], bar["outcome"], bar["error"], bar["agent"]) for bar in found] == [
        (1, "rescheduled", "WorkerLost", "host-2"), (2, "succeeded", None, "host-1")]
    first = found[0]
    assert (first["sent"], first["started"], first["ended"]) == (at(0), at(0.5), at(1.0))


def test_a_running_attempt_has_no_end_and_one_not_started_is_waiting():
    running, waiting = timeline.bars([row("long", 1, sending=0, sent=0.1, started=0.3, agent="a"),
                                      row("queued", 1, sending=0, sent=0.1)])
    assert (running["outcome"], running["ended"], running["started"]) == ("running", None, at(0.3))
    assert (waiting["outcome"], waiting["ended"], waiting["started"]) == ("waiting", None, None)


def test_cancelled_attempts_and_how_an_attempt_ended_first():
    found = timeline.bars([
        row("stopped", 1, sending=0, sent=0.1, started=0.2, cancelled=4),
        # Rescheduled, then cancelled while it waited for its retry: it ended rescheduled.
        row("retrying", 1, sending=0, sent=0.1, started=0.2, rescheduled=1, cancelled=3, error="TimeoutError"),
        # Sent, then taken back by a force-resume (a log event back to pending) and sent again.
        row("taken-back", 1, sending=0, sent=0.1, reset=2),
        # Cancelled before it was ever sent: no attempt, no bar.
        row("never", 0, cancelled=1),
    ])
    by_step = {bar["step"]: bar for bar in found}
    assert set(by_step) == {"stopped", "retrying", "taken-back"}
    assert (by_step["stopped"]["outcome"], by_step["stopped"]["ended"]) == ("cancelled", at(4))
    assert (by_step["retrying"]["outcome"], by_step["retrying"]["ended"], by_step["retrying"]["error"]) == (
        "rescheduled", at(1), "TimeoutError")
    assert (by_step["taken-back"]["outcome"], by_step["taken-back"]["reset"]) == ("cancelled", True)


def test_rows_are_ordered_by_first_attempt_and_a_step_never_sent_waits_last():
    found = timeline.bars([row("b", 1, sending=1, started=1.5, succeeded=2),
                           row("a", 1, sending=3, started=3.1, succeeded=4),
                           row("b", 2, sending=5, started=5.5)])
    steps = [{"name": name, "state": state, "operation": "op", "agent": "x"}
             for name, state in (("a", "succeeded"), ("b", "started"), ("later", "pending"))]
    shown = timeline.rows(found, steps, [], until=at(10))
    assert [(r["name"], r["state"], [bar["attempt"] for bar in r["bars"]]) for r in shown] == [
        ("b", "started", [1, 2]), ("a", "succeeded", [1]), ("later", "pending", [])]


def fan_out_rows(n, slots, now_at=None):
    """The attempt rows of ``n`` steps sent at once to ``slots`` processes, 0.5 s each."""
    free = [(0.0, slot) for slot in range(slots)]
    found = []
    for i in range(n):
        free_at, slot = heapq.heappop(free)
        end = free_at + 0.5
        ended = {} if now_at is not None and end > now_at else {"succeeded": end}
        found.append(row(f"m{i}", 1, sending=0, sent=0.01, started=free_at, agent=f"p{slot}", **ended))
        heapq.heappush(free, (end, slot))
    return found


def test_a_fan_out_of_1000_is_one_row_its_runs_packed_in_a_lane_per_process():
    found = timeline.bars(fan_out_rows(1000, 8))
    names = [f"m{i}" for i in range(1000)]
    steps = [{"name": name, "state": "succeeded", "operation": "op", "agent": "x"} for name in names]
    steps.append({"name": "join", "state": "pending", "operation": "op", "agent": "x"})
    group = {"members": names, "kind": "operation", "operation": "op"}
    shown = timeline.rows(found, steps, [group], until=at(100))
    assert [r.get("group") or r["name"] for r in shown] == ["m0", "join"]
    fan = shown[0]
    assert fan["label"] == "m0 \u2026 m999 \u00b7 1000 steps" and len(fan["members"]) == 1000
    assert fan["lanes"] == 8
    # Within a lane, no two runs overlap.
    by_lane = {}
    for member in fan["members"]:
        for bar in member["bars"]:
            by_lane.setdefault(bar["lane"], []).append((bar["started"], bar["ended"]))
    for runs in by_lane.values():
        runs.sort()
        assert all(a[1] <= b[0] for a, b in zip(runs, runs[1:]))


def test_more_runs_at_once_than_lanes_share_them_and_those_never_started_share_one_lane_below():
    running = timeline.bars([row(f"r{i}", 1, sending=0, started=0.1) for i in range(1000)])
    assert timeline.lanes(running, at(5)) == timeline.MAX_LANES
    assert timeline.lanes(running, at(5), most=3) == 3
    assert {bar["lane"] for bar in running} == {0, 1, 2}
    waiting = timeline.bars([row(f"w{i}", 1, sending=0, sent=0.1) for i in range(1000)])
    assert timeline.lanes(running[:2] + waiting, at(5)) == 3
    assert {bar["lane"] for bar in waiting} == {2}
    assert timeline.lanes(waiting, at(5)) == 1


# --- read from the events the transitions write --------------------------------------------------

def test_the_attempts_are_read_from_the_events_of_each_move(make_execution):
    execution = make_execution(started_at=at(0))
    operation = Operation.objects.create(execution=execution, name="flaky", operation="op", agent="host-1")
    lost = {"error": {"type": "WorkerLost", "message": "gone", "traceback": "x" * 10_000}}
    moves = [(0, OperationState.SENDING, None, None), (0.1, OperationState.SENT, 1, None),
             (0.3, OperationState.STARTED, 1, {"agent": "host-1"}), (1.0, OperationState.RESCHEDULED, 1, lost),
             (2.0, OperationState.SENDING, None, None), (2.1, OperationState.SENT, 2, None),
             (2.2, OperationState.STARTED, 2, {"agent": "host-1"})]
    now = [at(0)]
    with clock.using(lambda: now[0]):
        for seconds, target, attempt, data in moves:
            now[0] = at(seconds)
            operation_transition(operation, target, attempt=attempt, data=data)

    def seen():
        return [(b["attempt"], b["sent"], b["started"], b["ended"], b["outcome"], b["error"], b["agent"], b["reset"])
                for b in timeline.bars(timeline.attempt_rows(execution.pk))]

    assert seen() == [(1, at(0), at(0.3), at(1.0), "rescheduled", "WorkerLost", "host-1", False),
                      (2, at(2.0), at(2.2), None, "running", None, "host-1", False)]
    # A log line of the operation's own that looks like a move is not one; a force-resume's reset is.
    Event.objects.create(execution=execution, operation="flaky", type="log", message="a line",
                         data={"to": "pending", "attempt": 2}, timestamp=at(2.5))
    with clock.using(lambda: at(3.0)):
        operation_transition(operation, OperationState.PENDING)
    assert seen()[1] == (2, at(2.0), at(2.2), at(3.0), "cancelled", None, "host-1", True)


def test_a_local_steps_row_is_marked_local_and_its_bar_names_the_managers_queue(make_execution):
    """A local step ran inside the manager's pass: its row says ``local`` (left out for the
    others, as a bar's empty fields are), its bar's agent is the managers' queue."""
    execution = make_execution(started_at=at(0))
    steps = {"tally": Operation.objects.create(execution=execution, name="tally", operation="local_add",
                                               agent="management", local=True),
             "ship": Operation.objects.create(execution=execution, name="ship", operation="remote_double",
                                              agent="warehouse")}
    now = [at(0)]
    with clock.using(lambda: now[0]):
        for offset, (name, operation) in enumerate(steps.items()):
            for seconds, target, attempt, data in [(0, OperationState.SENDING, None, None),
                                                   (0.1, OperationState.SENT, 1, None),
                                                   (0.2, OperationState.STARTED, 1, {"agent": operation.agent}),
                                                   (0.5, OperationState.SUCCEEDED, 1, None)]:
                now[0] = at(offset + seconds)
                operation_transition(operation, target, attempt=attempt, data=data)
    data = timeline.of(execution, now=at(5))
    rows = {row["name"]: row for row in data["rows"]}
    assert rows["tally"]["local"] is True and "local" not in rows["ship"]
    assert [(bar["agent"], bar["outcome"]) for bar in rows["tally"]["bars"]] == [("management", "succeeded")]
    assert [(bar["agent"], bar["outcome"]) for bar in rows["ship"]["bars"]] == [("warehouse", "succeeded")]


def fan_out(n, *, now, agents=4, slots=2, seconds=(0.3, 0.9), retry_every=0, fail_every=0, lag=60.0,
            status=ExecutionStatus.STARTED):
    """Store an execution of ``prepare``, then ``item-0`` … ``item-<n-1>`` (a fan-out sent at once
    to ``agents`` agents of ``slots`` processes each, each item ``seconds`` long), then ``report``:
    its operations, dependencies and every event of their moves, as the engine writes them, the
    execution having started ``lag`` seconds before ``now``. Every ``retry_every``-th item's first
    attempt is lost (rescheduled, sent again a second later); every ``fail_every``-th fails."""
    origin = now - timedelta(seconds=lag)
    execution = Execution.objects.create(workflow_id="example", status=status, started_at=origin)
    events, operations = [], []

    def moves(name, attempt, sent, started, ended, how, agent, error=None):
        """The events of one attempt, those after ``now`` left out; returns the step's state."""
        chain = [(sent, "pending" if attempt == 1 else "rescheduled", "sending", {}),
                 (sent + 0.01, "sending", "sent", {}), (started, "sent", "started", {"agent": agent})]
        if ended is not None:
            failure = {"error": {"type": error, "message": "", "traceback": ""}} if error else {}
            chain.append((ended, "started", how, failure))
        state = "pending"
        for moment, source, target, data in chain:
            if moment > lag:
                break
            events.append(Event(execution=execution, operation=name, type=f"task_{target}",
                                message=f"{source} -> {target}", timestamp=origin + timedelta(seconds=moment),
                                data={"from": source, "to": target, "attempt": attempt, **data}))
            state = target
        return state

    def step(name, **fields):
        operations.append(Operation(execution=execution, name=name, operation="process", agent="host-1", **fields))

    step("prepare", state=moves("prepare", 1, 0.0, 0.1, 2.0, "succeeded", "host-1"), attempt=1)
    slots_free = [(2.0, f"host-{a + 1}", s) for a in range(agents) for s in range(slots)]
    heapq.heapify(slots_free)
    queue = [(2.05, i, 1) for i in range(n)]  # (sent, item, attempt)
    heapq.heapify(queue)
    states = {}
    while queue:
        sent, i, attempt = heapq.heappop(queue)
        free_at, agent, slot = heapq.heappop(slots_free)
        started = max(free_at, sent + 0.02)
        ended = started + seconds[0] + (seconds[1] - seconds[0]) * ((i * 7919) % 100) / 100
        lost = retry_every and i % retry_every == 3 and attempt == 1
        failed = fail_every and i % fail_every == 5
        how = "rescheduled" if lost else "failed" if failed else "succeeded"
        error = "WorkerLost" if lost else "ValueError" if failed else None
        states[i] = (moves(f"item-{i}", attempt, sent, started, ended, how, agent, error), attempt)
        if lost:
            heapq.heappush(queue, (ended + 1.0, i, 2))
        heapq.heappush(slots_free, (ended, agent, slot))
    for i in range(n):
        step(f"item-{i}", state=states[i][0], attempt=states[i][1])
    step("report", state="pending", attempt=0)
    Operation.objects.bulk_create(operations)
    by_name = {operation.name: operation for operation in operations}
    items = [by_name[f"item-{i}"] for i in range(n)]
    OperationDependency.objects.bulk_create(
        [OperationDependency(operation=item, depends_on=by_name["prepare"]) for item in items]
        + [OperationDependency(operation=by_name["report"], depends_on=item) for item in items])
    Event.objects.bulk_create(events)
    return execution


def test_the_json_of_a_fan_out_of_1000_has_one_row_for_it(make_execution):
    now = at(100)
    execution = fan_out(1000, now=now, retry_every=100)
    data = timeline.of(execution, now=now)
    assert (data["active"], data["too_large"], data["steps"]) == (True, False, 1002)
    assert [r.get("group") or r["name"] for r in data["rows"]] == ["prepare", "item-0", "report"]
    fan = data["rows"][1]
    assert fan["lanes"] == 8 + 1 and len(fan["members"]) == 1000  # a lane per process, and the queue
    assert all(member["bars"] for member in fan["members"]), "every item was sent"
    outcomes = {}
    for member in fan["members"]:
        for bar in member["bars"]:
            outcomes[bar["outcome"]] = outcomes.get(bar["outcome"], 0) + 1
    assert data["attempts"] == 1 + sum(outcomes.values())
    # At now, 60 s in: most items ran, 8 run (one per process), the rest wait in their queues.
    assert outcomes["running"] == 8 and outcomes["succeeded"] > 700 and outcomes["waiting"] > 50
    retried = [member for member in fan["members"] if member["bars"][0]["outcome"] == "rescheduled"]
    assert retried and all(member["bars"][0]["error"] == "WorkerLost" for member in retried)
    assert data["until"] == 60.0 and data["ended"] is None
    assert data["rows"][2]["bars"] == [] and data["rows"][2]["state"] == "pending"


def test_past_the_limit_of_attempts_the_timeline_is_not_drawn(make_execution, monkeypatch):
    execution = fan_out(20, now=at(100))
    monkeypatch.setattr(timeline, "ATTEMPT_LIMIT", 10)
    assert timeline.of(execution, now=at(100))["too_large"] is True
    monkeypatch.setattr(timeline, "ATTEMPT_LIMIT", 21)
    assert timeline.of(execution, now=at(100))["too_large"] is False


def test_an_ended_execution_draws_up_to_its_end(make_execution):
    execution = fan_out(3, now=at(100), status=ExecutionStatus.COMPLETED, lag=5)
    Execution.objects.filter(pk=execution.pk).update(ended_at=at(97))
    execution.refresh_from_db()
    data = timeline.of(execution, now=at(200))
    assert (data["active"], data["until"], data["ended"]) == (False, 2.0, 2.0)


# --- the page -------------------------------------------------------------------------------------

def test_the_page_has_the_timeline_and_its_json_for_who_may_view_it(admin_client, client):
    execution = fan_out(10, now=timezone.now())
    page = admin_client.get(reverse("admin:workflows_app_execution_change", args=[execution.pk])).content.decode()
    assert f'id="sy-timeline" class="sy-timeline" data-url="{timeline_url(execution)}"' in page
    assert "workflows_app/timeline.js" in page and "workflows_app/timeline.css" in page
    data = admin_client.get(timeline_url(execution)).json()
    assert data["attempts"] == 11 and data["rows"][1]["group"] == "item-0"

    # Not staff: the admin's login page. Staff without view_execution: refused.
    assert client.get(timeline_url(execution)).status_code == 302
    client.force_login(make_user("nobody", (), is_staff=True))
    refused = client.get(timeline_url(execution))
    assert refused.status_code == 404 and refused.json()["error_code"] == "not_found"
    assert admin_client.get(timeline_url(Execution(pk=uuid.uuid4()))).status_code == 404
    assert admin_client.get(reverse("admin:workflows_app_execution_timeline", args=["nope"])).status_code == 404


def test_a_workflow_with_a_permission_of_its_own_hides_its_timeline(client, make_execution, monkeypatch):
    register_guarded(monkeypatch)
    execution = make_execution(workflow_id=GUARDED)
    client.force_login(make_user("viewer", VIEWER, is_staff=True))
    assert client.get(timeline_url(execution)).status_code == 404
    other = make_execution()
    assert client.get(timeline_url(other)).status_code == 200


def test_the_json_runs_the_same_queries_for_10_attempts_and_for_1000(admin_client):
    counts = {}
    for n in (10, 1000):
        execution = fan_out(n, now=timezone.now())
        with CaptureQueriesContext(connection) as captured:
            response = admin_client.get(timeline_url(execution))
        assert response.status_code == 200
        assert response.json()["attempts"] == n + 1
        counts[n] = len(captured)
    # The session and the user, the execution, the attempts, the operations' count, the graph (two).
    assert counts[10] == counts[1000] == 7, counts
