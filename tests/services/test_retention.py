"""Retention: ``retention.purge`` and ``manage.py purge_executions`` delete ended
executions older than a cutoff with their operations, dependency rows, events, waits and child
executions, in batches — never an active execution nor one with an active ancestor, loading no
event or operation into memory, locking nothing of an active execution; the managers purge
daily with ``WORKFLOWS["RETENTION_DAYS"]``; the admin deletes ended executions, with Django's
confirmation page, through the same service."""

import io
import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from agents.worker import manager
from tests.integration.harness import ROOT, child_environment
from workflows_app import retention
from workflows_app.models import Event, Execution, Operation, OperationDependency, Wait
from workflows_app.states import (
    EXECUTION_ACTIVE,
    EXECUTION_TERMINAL,
    EventType,
    ExecutionStatus,
    OperationState,
    WaitKind,
    WaitOutcome,
)

DAY = timedelta(days=1)
TABLES = {model: model._meta.db_table for model in (Event, Execution, Operation, OperationDependency, Wait)}


@pytest.fixture
def make(make_execution):
    """An execution in ``status`` that ended ``age`` ago (None: active, created ``age`` ago),
    with ``operations`` chained operations, an event per operation and its end, and a wait
    that took one of them."""

    def build(status=ExecutionStatus.COMPLETED, age=40 * DAY, operations=2, parent=None):
        at = timezone.now() - age
        execution = make_execution(status=status, parent=parent, parent_step="child" if parent else "",
                                   ended_at=at if status in EXECUTION_TERMINAL else None)
        Execution.objects.filter(pk=execution.pk).update(created_at=at - DAY)  # auto_now_add on create
        made = Operation.objects.bulk_create(
            Operation(execution=execution, name=f"step-{i}", operation="noop", agent="a", state=OperationState.SUCCEEDED)
            for i in range(operations))
        OperationDependency.objects.bulk_create(
            OperationDependency(operation=made[i], depends_on=made[i - 1]) for i in range(1, operations))
        events = Event.objects.bulk_create(
            [Event(execution=execution, operation=f"step-{i}", type=EventType.TASK_SUCCEEDED) for i in range(operations)]
            + [Event(execution=execution, type=EventType.EVENT_RECEIVED, data={"name": "go"})])
        Wait.objects.create(execution=execution, key="event:go#1", kind=WaitKind.EVENT, name="go",
                            outcome=WaitOutcome.RECEIVED, event=events[-1])
        return execution

    return build


def left(*executions) -> set:
    return set(Execution.objects.filter(pk__in=[e.pk for e in executions]).values_list("pk", flat=True))


def rows() -> dict:
    return {model.__name__: model.objects.count() for model in TABLES}


# --- what goes, what stays -----------------------------------------------------------------------


def test_purge_deletes_ended_executions_older_than_the_cutoff_with_everything_theirs(make):
    old = [make(status) for status in (ExecutionStatus.COMPLETED, ExecutionStatus.FAILED, ExecutionStatus.CANCELLED,
                                       ExecutionStatus.TIMED_OUT)]
    recent = make(age=DAY)
    active = [make(status, age=100 * DAY) for status in EXECUTION_ACTIVE]

    counts = retention.purge(30)

    assert left(*old) == set()
    assert left(recent, *active) == {recent.pk, *(e.pk for e in active)}
    assert (counts.executions, counts.operations, counts.events, counts.kept) == (4, 8, 12, 0)
    survivors = 1 + len(active)
    assert rows() == {"Event": 3 * survivors, "Execution": survivors, "Operation": 2 * survivors,
                      "OperationDependency": survivors, "Wait": survivors}


def test_a_purged_execution_of_a_schedule_leaves_its_slot_without_it(make):
    """The schedule's history keeps the slot (that it fired, when); the execution is gone."""
    from workflows_app.models import Schedule, ScheduleSlot

    old = make(ExecutionStatus.COMPLETED)
    schedule = Schedule.objects.create(workflow_id="example", interval=60)
    slot = ScheduleSlot.objects.create(schedule=schedule, slot=timezone.now() - 40 * DAY, outcome="started", execution=old)

    assert retention.purge(30).executions == 1
    connection.check_constraints()  # what the commit checks: no slot names a deleted execution
    slot.refresh_from_db()
    assert slot.execution_id is None and left(old) == set()


def test_purge_by_status_deletes_only_those(make):
    failed, cancelled, completed = (make(s) for s in (ExecutionStatus.FAILED, ExecutionStatus.CANCELLED,
                                                      ExecutionStatus.COMPLETED))
    counts = retention.purge(30, [ExecutionStatus.FAILED, ExecutionStatus.CANCELLED])
    assert counts.executions == 2
    assert left(failed, cancelled, completed) == {completed.pk}
    with pytest.raises(ValueError, match="not a status an ended execution has: started"):
        retention.purge(30, [ExecutionStatus.STARTED])


def test_an_ended_row_without_ended_at_counts_from_its_creation(make):
    old, new = make(), make(age=DAY)
    Execution.objects.filter(pk__in=[old.pk, new.pk]).update(ended_at=None)
    assert retention.purge(30).executions == 1
    assert left(old, new) == {new.pk}


def test_never_a_child_of_an_active_parent_nor_a_tree_with_an_active_execution(make):
    running = make(ExecutionStatus.STARTED, age=100 * DAY)
    its_child = make(parent=running)
    ended = make()
    resumed_child = make(ExecutionStatus.STARTED, parent=ended)
    grandchild = make(parent=resumed_child)

    counts = retention.purge(30)

    assert counts.executions == 0 and counts.kept == 1  # the ended parent, held by its active child
    assert left(running, its_child, ended, resumed_child, grandchild) == {
        running.pk, its_child.pk, ended.pk, resumed_child.pk, grandchild.pk}


def test_children_of_a_purged_parent_go_with_it_and_a_young_tree_stays_whole(make):
    parent = make()
    child = make(parent=parent)
    grandchild = make(ExecutionStatus.FAILED, parent=child)
    young = make(age=DAY)
    old_child_of_young = make(parent=young)
    old_parent_of_young = make()
    young_child = make(parent=old_parent_of_young, age=DAY)  # resumed, and ended again lately

    counts = retention.purge(30, [ExecutionStatus.COMPLETED])  # the grandchild goes too, failed as it is

    assert left(parent, child, grandchild) == set()
    assert (counts.executions, counts.operations, counts.events, counts.kept) == (3, 6, 9, 1)
    assert left(young, old_child_of_young, old_parent_of_young, young_child) == {
        young.pk, old_child_of_young.pk, old_parent_of_young.pk, young_child.pk}


def test_a_dry_run_counts_what_a_purge_deletes_and_deletes_nothing(make, monkeypatch):
    monkeypatch.setattr(retention, "BATCH_SIZE", 3)  # several batches
    for _ in range(7):
        make(parent=make(operations=3), operations=1)
    make(age=DAY)
    make(parent=make(ExecutionStatus.STARTED))
    before = rows()

    planned = retention.purge(30, dry_run=True)

    assert rows() == before
    assert planned.as_dict() == {"executions": 14, "operations": 28, "events": 42, "kept": 0}
    assert retention.purge(30) == planned


def test_a_purge_loads_no_event_operation_or_wait_and_locks_no_table(make, monkeypatch):
    """Every statement on those tables is a DELETE by execution (Django's fast delete, or
    _raw_delete): none reads their rows into memory, as Django's collector would to follow the
    relations to them."""
    monkeypatch.setattr(retention, "BATCH_SIZE", 2)
    for _ in range(5):
        make(operations=4)
    with CaptureQueriesContext(connection) as captured:
        assert retention.purge(30).events == 25
    touching = [q["sql"] for q in captured if any(f'"{TABLES[m]}"' in q["sql"] for m in (Event, Operation, Wait))]
    assert touching and all(sql.startswith("DELETE") for sql in touching), touching
    assert not [q["sql"] for q in captured if "LOCK TABLE" in q["sql"].upper()]
    assert rows() == dict.fromkeys(rows(), 0)


@pytest.mark.django_db(transaction=True)
def test_purges_that_meet_share_the_work_and_each_counts_what_it_deleted(make, monkeypatch):
    """Several managers purge daily: two at once neither fail nor count a row twice."""
    monkeypatch.setattr(retention, "BATCH_SIZE", 5)
    for i in range(60):
        make(parent=make(operations=1), operations=1) if i % 3 == 0 else make(operations=1)

    def run(_):
        try:
            return retention.purge(30)
        finally:
            connection.close()

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(run, range(2))
    assert first.executions + second.executions == 80
    assert first.events + second.events == 160
    assert rows() == dict.fromkeys(rows(), 0)


@pytest.mark.django_db(transaction=True)
def test_discard_takes_the_rows_another_transaction_held_once_it_lets_them_go(make):
    """A benchmark discards its own rows while managers sharing the database may be looking at one
    (a tick locking it): the row is skipped while held, and gone when discard returns."""
    if connection.vendor != "postgresql":
        pytest.skip("rows held by another transaction (SKIP LOCKED): PostgreSQL's")
    executions = [make(status=ExecutionStatus.STARTED, operations=1) for _ in range(3)]
    held, release = threading.Event(), threading.Event()

    def hold():
        try:
            with transaction.atomic():
                Execution.objects.select_for_update().get(pk=executions[1].pk)
                held.set()
                release.wait(5)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(5)
    threading.Timer(0.5, release.set).start()
    counts = retention.discard(Execution.objects.filter(pk__in=[e.pk for e in executions]))
    holder.join()
    assert not left(*executions)
    assert (counts.executions, counts.kept) == (3, 0)


# --- the command -------------------------------------------------------------------------------------


def command(*args, stderr=None) -> str:
    out = io.StringIO()
    call_command("purge_executions", *args, stdout=out, stderr=stderr or io.StringIO())
    return out.getvalue()


def test_the_command_deletes_counts_and_dry_runs(make, monkeypatch):
    old, failed, recent = make(), make(ExecutionStatus.FAILED), make(age=DAY)
    monkeypatch.setattr(retention, "BATCH_SIZE", 1)  # a run of several batches shows its progress
    progress = io.StringIO()
    planned = json.loads(command("--older-than", "30", "--status", "completed", "failed", "--dry-run", "--json",
                                 stderr=progress))
    assert planned["executions"] == 2 and planned["dry_run"] is True and planned["statuses"] == ["completed", "failed"]
    assert "dry run: 2 of 2 executions looked at" in progress.getvalue()
    assert left(old, failed) == {old.pk, failed.pk}
    assert command("--older-than", "30", "--status", "failed").startswith("deleted 1 executions, 2 operations, 3 events")
    done = json.loads(command("--older-than", "0.5", "--json"))
    assert (done["executions"], done["operations"], done["events"], done["kept"]) == (2, 4, 6, 0)
    assert left(old, failed, recent) == set()


def test_the_command_refuses_bad_input_in_process(db):
    for args, says in [(["--older-than", "ten"], "--older-than takes a number of days >= 0, not 'ten'"),
                       (["--older-than", "-1"], "--older-than takes a number of days >= 0, not '-1'"),
                       (["--older-than", "nan"], "--older-than takes a number of days >= 0, not 'nan'"),
                       (["--older-than", "3", "--status", "started"], "--status: not a status an ended execution "
                        "has: started (one of cancelled, completed, failed, timed_out)")]:
        with pytest.raises(CommandError) as refused:
            command(*args)
        assert str(refused.value) == says


@pytest.mark.integration
def test_each_bad_input_is_one_line_on_stderr_and_a_non_zero_exit(transactional_db, tmp_path):
    # No transaction held open: on SQLite it would hold the write lock, and Django 6.1's system
    # checks (every command runs them) wait for it, then find the database unable to do JSON.
    env = child_environment(workflows={}, markers_dir=tmp_path)
    cases = [(["--older-than", "ten"], "CommandError: --older-than takes a number of days >= 0, not 'ten'"),
             (["--older-than", "-3", "--json"], "CommandError: --older-than takes a number of days >= 0, not '-3'"),
             (["--older-than", "3", "--status", "done"], "CommandError: --status: not a status an ended execution has"),
             (["--older-than", "3", "--status", "queued"], "CommandError: --status: not a status an ended execution "
              "has: queued"),
             ([], "manage.py purge_executions: error: the following arguments are required: --older-than")]

    def run(argv):
        return subprocess.run([sys.executable, "manage.py", "purge_executions", *argv], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)

    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(run, [argv for argv, _ in cases]))
    for (argv, says), done in zip(cases, results):
        lines = done.stderr.splitlines()
        assert done.returncode != 0 and not done.stdout and len(lines) == 1 and says in lines[0], (argv, done)


# --- the managers' daily purge ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_with_retention_days_the_managers_tick_purges_old_ended_executions_daily(make, outbox):
    old, recent, active = make(), make(age=DAY), make(ExecutionStatus.STARTED, age=100 * DAY)
    child_of_active = make(parent=active)
    tick = manager.Tick()
    now = timezone.now()
    with override_settings(WORKFLOWS={"RETENTION_DAYS": 30}):
        tick(now)
        assert tick.purge.thread is None, "not while a starting manager carries on"
        tick(now + manager.PURGE_FIRST_AFTER)
        tick.purge.thread.join(60)
        assert left(old, recent, active, child_of_active) == {recent.pk, active.pk, child_of_active.pk}
        assert not Event.objects.filter(execution_id=old.pk).exists()
        first = tick.purge.thread
        tick(now + manager.PURGE_FIRST_AFTER + timedelta(hours=23))
        assert tick.purge.thread is first, "once a day"
        tick(now + manager.PURGE_FIRST_AFTER + manager.PURGE_EVERY)
        assert tick.purge.thread is not first
        tick.purge.thread.join(60)


@pytest.mark.django_db
def test_without_retention_days_the_tick_purges_nothing(make, outbox):
    old = make()
    tick = manager.Tick()
    tick(timezone.now() + 2 * manager.PURGE_EVERY)
    tick(timezone.now() + 4 * manager.PURGE_EVERY)
    assert tick.purge.thread is None
    assert left(old) == {old.pk}


# --- the admin -----------------------------------------------------------------------------------------


@pytest.fixture
def deleter(db, client):
    """A staff user who may view and delete executions, and nothing else."""
    user = get_user_model().objects.create_user("deleter", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=["view_execution", "delete_execution"]))
    client.force_login(user)
    return client


def test_the_admin_deletes_an_ended_execution_with_its_long_history_through_the_service(deleter, make):
    """Django's own confirmation would load each of the 3,000 events and 500 operations to list
    them, and refuse: nobody may delete events by hand. The page counts them instead, and the
    delete takes everything of the execution and its child."""
    execution = make(operations=500)
    Event.objects.bulk_create(Event(execution=execution, type=EventType.LOG, message=f"line {i}") for i in range(2500))
    child = make(parent=execution)
    url = reverse("admin:workflows_app_execution_delete", args=[execution.pk])

    with CaptureQueriesContext(connection) as captured:
        page = deleter.get(url)
    assert page.status_code == 200
    text = page.content.decode()
    assert "Are you sure" in text and "3004" in text.replace(",", "") and "502" in text
    reads = [q["sql"] for q in captured if f'"{TABLES[Event]}"' in q["sql"] or f'"{TABLES[Operation]}"' in q["sql"]]
    assert reads and all(sql.startswith("SELECT COUNT(*)") for sql in reads), reads

    with CaptureQueriesContext(connection) as captured:
        deleter.post(url, {"post": "yes"})
    assert left(execution, child) == set()
    assert rows() == dict.fromkeys(rows(), 0)
    touching = [q["sql"] for q in captured if f'"{TABLES[Event]}"' in q["sql"]]
    assert touching and all(sql.startswith(("DELETE", "SELECT COUNT(*)")) for sql in touching), touching


def test_the_admin_deletes_nothing_active_nor_below_an_active_execution(deleter, client, make):
    running = make(ExecutionStatus.STARTED)
    its_child = make(parent=running)
    ended = make()
    for execution in (running, its_child):
        assert deleter.get(reverse("admin:workflows_app_execution_delete", args=[execution.pk])).status_code == 403
    selected = [running.pk, its_child.pk, ended.pk]
    response = deleter.post(reverse("admin:workflows_app_execution_changelist"),
                            {"action": "delete_ended", "_selected_action": selected, "post": "yes"}, follow=True)
    notes = [str(message) for message in response.context["messages"]]
    assert any("1 active execution(s) left alone" in note for note in notes), notes
    assert any("1 ended execution(s) left alone" in note for note in notes), notes
    assert left(running, its_child, ended) == {running.pk, its_child.pk}

    client.logout()
    viewer = get_user_model().objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_execution"))
    client.force_login(viewer)
    kept = make()
    assert client.get(reverse("admin:workflows_app_execution_delete", args=[kept.pk])).status_code == 403


# --- at scale --------------------------------------------------------------------------------------------

SCALE = 100_000


def insert_history(n, ended_at):
    """``n`` ended executions, the i-th i seconds before ``ended_at``, in one INSERT … SELECT per
    table (a recursive CTE counts, on both databases): every 50th (i % 50 == 1) a child of the one
    before; every 10th with 2 chained operations, 5 events and a wait that took one of them."""
    vendor = connection.vendor
    uuid = {"postgresql": "lpad(to_hex({}), 32, '0')::uuid", "sqlite": "printf('%%032x', {})"}[vendor]
    false = {"postgresql": "false", "sqlite": "0"}[vendor]
    empty, array = {"postgresql": ("'{}'::jsonb", "'[]'::jsonb"), "sqlite": ("'{}'", "'[]'")}[vendor]
    t = {model.__name__: connection.ops.quote_name(table) for model, table in TABLES.items()}
    at = connection.ops.adapt_datetimefield_value(ended_at)
    # The i-th ended i seconds before ``ended_at``, as a history's executions end one after another.
    ended = {"postgresql": "%s::timestamptz - make_interval(secs => i)",
             "sqlite": "strftime('%%Y-%%m-%%d %%H:%%M:%%f', %s, '-' || i || ' seconds')"}[vendor]
    series = "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %s)"
    steps = "(SELECT 0 AS k UNION ALL SELECT 1) AS steps"
    with connection.cursor() as cursor:
        cursor.execute(f"""
            INSERT INTO {t['Execution']} (id, workflow_id, parameters, status, failure_mode, wait_after_fail, payload,
                error, is_dry_run, created_by, created_at, started_at, ended_at, token_hash, passes, parent_id, parent_step,
                patches)
            {series}
            SELECT {uuid.format('i')}, 'history', {empty},
                   CASE i %% 4 WHEN 0 THEN 'completed' WHEN 1 THEN 'failed' WHEN 2 THEN 'cancelled' ELSE 'timed_out' END,
                   'no_new_calls', 600, {empty}, '', {false}, '', %s, %s, {ended}, '', 0,
                   CASE WHEN i %% 50 = 1 AND i > 1 THEN {uuid.format('i - 1')} END,
                   CASE WHEN i %% 50 = 1 AND i > 1 THEN 'child' ELSE '' END, {empty}
            FROM s""", [n, at, at, at])
        cursor.execute(f"""
            INSERT INTO {t['Operation']} (id, execution_id, name, kind, operation, args, kwargs, agent, state, attempt,
                current_retries, max_retries, retry_interval, retry_backoff, pending_dependencies, awaited,
                failure_handled, incarnation, pending_at, after)
            {series}
            SELECT {uuid.format('1000000000 + 10 * i + k')}, {uuid.format('i')}, 'step-' || k, 'operation', 'noop',
                   {array}, {empty}, 'a', 'succeeded', 1, 0, 3, 5, 1, 0, {false}, {false}, '', %s, {array}
            FROM s, {steps} WHERE i %% 10 = 0""", [n, at])
        cursor.execute(f"""
            INSERT INTO {t['OperationDependency']} (operation_id, depends_on_id)
            {series}
            SELECT {uuid.format('1000000000 + 10 * i + 1')}, {uuid.format('1000000000 + 10 * i')}
            FROM s WHERE i %% 10 = 0""", [n])
        cursor.execute(f"""
            INSERT INTO {t['Event']} (execution_id, operation, type, message, data, timestamp)
            {series}
            SELECT {uuid.format('i')}, NULL, 'event_received', '', {empty}, %s
            FROM s, {steps}, (SELECT 0 AS m UNION ALL SELECT 1 UNION ALL SELECT 2) AS more
            WHERE i %% 10 = 0 AND NOT (k = 1 AND m = 2)""", [n, at])
        cursor.execute(f"""
            INSERT INTO {t['Wait']} (execution_id, key, kind, name, outcome, created_at, event_id, after)
            SELECT e.id, 'event:go#1', 'event', 'go', 'received', %s,
                   (SELECT min(v.id) FROM {t['Event']} v WHERE v.execution_id = e.id), {array}
            FROM {t['Execution']} e WHERE e.workflow_id = 'history'
              AND EXISTS (SELECT 1 FROM {t['Operation']} o WHERE o.execution_id = e.id)""", [at])


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_100000_ended_executions_are_purged_while_an_active_one_is_never_locked(make):
    """The purge runs in a thread with its own connection while this one takes the active
    execution's row, operations and waits ``FOR UPDATE NOWAIT`` in short transactions: on
    PostgreSQL none of them ever finds a lock (a lock error would fail the test), and the purge
    holds no lock on a table but the row-level ones (pg_locks). On SQLite, which has no row locks,
    each transaction of this one waits for the purge's batch at most: the longest wait is shown."""
    old = timezone.now() - 40 * DAY
    began = time.monotonic()
    insert_history(SCALE, old)
    active = make(ExecutionStatus.STARTED, age=100 * DAY, operations=3)
    child_of_active = make(parent=active)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # what autovacuum does after a load: the planner knows the tables
    seeded = time.monotonic() - began
    assert rows() == {"Execution": SCALE + 2, "Operation": SCALE // 10 * 2 + 5, "Event": SCALE // 10 * 5 + 7,
                      "OperationDependency": SCALE // 10 + 3, "Wait": SCALE // 10 + 2}
    before = Execution.objects.filter(pk=active.pk).values().get()

    result, purge_pid, failures, batches = {}, [], [], []

    @contextmanager
    def timed_batch():  # retention's guard, entered around each batch: how long each one takes
        began_batch = time.monotonic()
        yield
        batches.append(time.monotonic() - began_batch)

    def purge():
        try:
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    purge_pid.append(cursor.fetchone()[0])
            started = time.monotonic()
            result["counts"] = retention.purge(30, guard=timed_batch)
            result["seconds"] = time.monotonic() - started
        except Exception as exc:  # noqa: BLE001 — reported by the test
            failures.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=purge)
    thread.start()
    tries, longest, modes = 0, 0.0, set()
    while thread.is_alive():
        began_try = time.monotonic()
        with transaction.atomic():
            Execution.objects.select_for_update(nowait=True).get(pk=active.pk)
            list(Operation.objects.select_for_update(nowait=True).filter(execution_id=active.pk))
            list(Wait.objects.select_for_update(nowait=True).filter(execution_id=active.pk))
            if purge_pid:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT DISTINCT mode FROM pg_locks WHERE pid = %s AND locktype = 'relation'",
                                   [purge_pid[0]])
                    modes.update(mode for (mode,) in cursor.fetchall())
        longest = max(longest, time.monotonic() - began_try)
        tries += 1
        time.sleep(0.02)
    thread.join()

    assert not failures, failures
    counts = result["counts"]
    assert (counts.executions, counts.operations, counts.events, counts.kept) == (SCALE, SCALE // 10 * 2,
                                                                                   SCALE // 10 * 5, 0)
    assert left(active, child_of_active) == {active.pk, child_of_active.pk}
    assert Execution.objects.filter(pk=active.pk).values().get() == before
    assert rows() == {"Execution": 2, "Operation": 5, "Event": 7, "OperationDependency": 3, "Wait": 2}
    assert modes <= {"AccessShareLock", "RowShareLock", "RowExclusiveLock"}, modes
    if connection.vendor == "sqlite":
        # A writer waits for the batch that holds the database, at most: the longest batch of this
        # run (a loaded machine makes both longer), and the writer's own short transaction.
        assert longest < max(batches) + 0.5, (f"a writer waited {longest:.2f}s for the purge, longer than a batch "
                                              f"(the longest took {max(batches):.2f}s)")
    print(f"\n{connection.vendor}: seeded {SCALE} executions in {seeded:.1f} s, purged in {result['seconds']:.1f} s; "
          f"{tries} lock tries on the active execution meanwhile, the longest {longest * 1000:.0f} ms; "
          f"the purge's table locks: {sorted(modes) or 'not visible (SQLite)'}")
    assert tries > 10
