"""Idempotent starts (``services.start(..., idempotency_key=)``, ``workflows_app.flow.idempotency``):
the same key with the same request starts one execution and answers it again; with another
request it is refused; a key is its user's; it expires after ``WORKFLOWS["IDEMPOTENCY_SECONDS"]``;
two starts with one key at once start one execution (the unique constraint decides, in the
start's transaction); the purge deletes expired keys, and an execution's key goes with it."""

import threading
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core import checks
from django.db import connections
from django.test import override_settings
from django.utils import timezone

from tests.api.conftest import GUARDED, register_guarded
from workflows_app import clock, retention, services
from workflows_app.errors import ExistingRunningExecution, ParameterError, ValueRefused
from workflows_app.flow import idempotency
from workflows_app.flow.idempotency import IdempotencyConflict
from workflows_app.models import Event, Execution, IdempotencyKey
from workflows_app.states import ExecutionStatus

DAY = 86400


def later(seconds):
    """The engine's clock moved ``seconds`` on (``workflows_app.clock``), for a block."""
    return clock.using(lambda: timezone.now() + timedelta(seconds=seconds))


@pytest.fixture
def users(db):
    make = get_user_model().objects.create_superuser
    return make("alice", password="pw"), make("bob", password="pw")


# --- the same key ------------------------------------------------------------------------------


def test_the_same_key_and_request_answer_the_first_execution_and_start_nothing(
        db, outbox, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        first = services.start("demo", {"n": 2}, deployment_id="d1", idempotency_key="order-1")
    with django_capture_on_commit_callbacks(execute=True) as sent:
        again = services.start("demo", {"n": 2}, deployment_id="d1", idempotency_key="order-1")
    assert again.pk == first.pk
    assert (first.idempotent_replay, again.idempotent_replay) == (False, True)
    assert Execution.objects.count() == 1 and Event.objects.filter(execution=first).count() == 1
    assert sent == [] and outbox["advance"] == [str(first.pk)], "the replay sent nothing"


def test_a_replay_answers_the_execution_as_it_is_now(db, outbox):
    first = services.start("demo", idempotency_key="k")
    Execution.objects.filter(pk=first.pk).update(status=ExecutionStatus.STARTED)  # set-up: a manager took it
    assert services.start("demo", idempotency_key="k").status == ExecutionStatus.STARTED


def test_a_replay_of_a_busy_deployments_start_is_no_refusal(db, outbox):
    """The first start holds the deployment: the same request again is its replay, not a start
    refused for the deployment it holds itself."""
    first = services.start("demo", deployment_id="site", idempotency_key="k")
    Execution.objects.filter(pk=first.pk).update(status=ExecutionStatus.STARTED)
    assert services.start("demo", deployment_id="site", idempotency_key="k").pk == first.pk


def test_numbers_that_are_the_same_value_are_the_same_request(db, outbox):
    first = services.start("demo", timeout=30, idempotency_key="k")
    assert services.start("demo", timeout=30.0, idempotency_key="k").pk == first.pk
    assert services.start("demo", {}, timeout=30, idempotency_key="k").pk == first.pk, "no parameters are {}"


@pytest.mark.parametrize("change", [
    {"workflow_id": GUARDED},
    {"parameters": {"n": 3}},
    {"parameters": {"n": 2, "agent": "local"}},
    {"deployment_id": "d2"},
    {"failure_mode": "fail_fast"},
    {"timeout": 5},
    {"wait_after_fail": 1},
    {"dry_run": True},
    {"queue": True},
    {"force": True},
    {"priority": 5},
])
def test_the_same_key_with_another_request_is_a_conflict_and_starts_nothing(db, outbox, monkeypatch, change):
    register_guarded(monkeypatch)  # another workflow
    request = {"workflow_id": "demo", "parameters": {"n": 2}, "deployment_id": "d1"}
    first = services.start(**request, idempotency_key="order-1")
    with pytest.raises(IdempotencyConflict) as refused:
        services.start(**{**request, **change}, idempotency_key="order-1")
    assert refused.value.execution_id == first.pk and "order-1" in str(refused.value)
    assert list(Execution.objects.values_list("pk", flat=True)) == [first.pk]


def test_the_same_request_with_another_key_or_none_starts_another_execution(db, outbox):
    first = services.start("demo", idempotency_key="a")
    assert services.start("demo", idempotency_key="b").pk != first.pk
    assert services.start("demo").pk != first.pk
    assert Execution.objects.count() == 3


def test_a_key_is_its_users_own(users, outbox):
    alice, bob = users
    mine = services.start("demo", {"n": 1}, user=alice, idempotency_key="k")
    theirs = services.start("demo", {"n": 2}, user=bob, idempotency_key="k")  # another request: no conflict
    servers = services.start("demo", {"n": 1}, idempotency_key="k")  # the server's own (user=None)
    assert len({mine.pk, theirs.pk, servers.pk}) == 3 and not theirs.idempotent_replay
    assert services.start("demo", {"n": 1}, user=alice, idempotency_key="k").pk == mine.pk
    assert services.start("demo", {"n": 2}, user=bob, idempotency_key="k").pk == theirs.pk
    assert services.start("demo", {"n": 1}, idempotency_key="k").pk == servers.pk
    assert theirs.created_by == "bob"


# --- expiry --------------------------------------------------------------------------------------


def test_an_expired_key_starts_a_new_execution_and_takes_the_key_over(db, outbox):
    first = services.start("demo", idempotency_key="k")
    with later(DAY + 1):
        second = services.start("demo", {"n": 9}, idempotency_key="k")  # another request: no conflict either
        assert not second.idempotent_replay and second.pk != first.pk
        assert services.start("demo", {"n": 9}, idempotency_key="k").pk == second.pk
    assert list(IdempotencyKey.objects.values_list("key", "execution_id")) == [("k", second.pk)]


@override_settings(WORKFLOWS={"IDEMPOTENCY_SECONDS": 60})
def test_a_key_lasts_idempotency_seconds(db, outbox):
    first = services.start("demo", idempotency_key="k")
    with later(59):
        assert services.start("demo", idempotency_key="k").pk == first.pk
    with later(61):
        assert services.start("demo", idempotency_key="k").pk != first.pk


@pytest.mark.parametrize("value", [0, -5, 1.5, True, "86400", None])
def test_idempotency_seconds_must_be_a_whole_number_of_seconds_over_0(db, value):
    with override_settings(WORKFLOWS={"IDEMPOTENCY_SECONDS": value}):
        errors = checks.run_checks()
        assert [e.id for e in errors] == ["workflows.E002"] and "IDEMPOTENCY_SECONDS" in errors[0].msg
    with override_settings(WORKFLOWS={"IDEMPOTENCY_SECONDS": 1}):
        assert checks.run_checks() == []


# --- what is not stored ----------------------------------------------------------------------------


def test_a_refused_start_stores_no_key_and_the_key_starts_it_once_it_can_be(db, outbox):
    holder = services.start("demo", deployment_id="site")
    Execution.objects.filter(pk=holder.pk).update(status=ExecutionStatus.STARTED)
    with pytest.raises(ExistingRunningExecution):
        services.start("demo", deployment_id="site", idempotency_key="k")
    assert not IdempotencyKey.objects.exists()
    Execution.objects.filter(pk=holder.pk).update(status=ExecutionStatus.COMPLETED)
    started = services.start("demo", deployment_id="site", idempotency_key="k")
    assert not started.idempotent_replay and started.pk != holder.pk


def test_invalid_parameters_with_a_key_store_nothing(db, outbox):
    with pytest.raises(ParameterError):
        services.start("demo", {"nope": 1}, idempotency_key="k")
    assert not IdempotencyKey.objects.exists() and not Execution.objects.exists()
    assert not services.start("demo", idempotency_key="k").idempotent_replay


@pytest.mark.parametrize("key, says", [
    ("", "may not be empty"),
    ("x" * 256, "at most 255 characters, not 256"),
    ("a\nb", "control characters"),
    ("a\x7fb", "control characters"),
    ("a\x00b", "null characters"),
    ("a\ud800b", "lone surrogates"),
    (17, "a string, not int"),
])
def test_a_key_that_cannot_be_one_is_refused_and_nothing_is_started(db, outbox, key, says):
    with pytest.raises(ValueRefused, match=f"idempotency_key: {says}"):
        services.start("demo", idempotency_key=key)
    assert not Execution.objects.exists()


def test_a_key_of_255_characters_with_spaces_and_any_letters_is_one(db, outbox):
    key = ("order 1187 · é ✓ " * 20)[:255]
    first = services.start("demo", idempotency_key=key)
    assert services.start("demo", idempotency_key=key).pk == first.pk


# --- at once -----------------------------------------------------------------------------------------


def start_at_once(monkeypatch, where, count=2):
    """``count`` threads start the same request with one key, each on its own database connection,
    held together by a barrier at ``where``: ``"look"``, after each looked for an earlier start
    with the key and found none (before its transaction); ``"insert"``, inside its transaction
    just before it inserts the key. Returns their executions (or errors)."""
    barrier = threading.Barrier(count, timeout=20)
    if where == "look":
        look = idempotency.earlier

        def earlier(claim):
            found = look(claim)
            barrier.wait()
            return found

        monkeypatch.setattr(idempotency, "earlier", earlier)
    else:
        take = idempotency.take

        def taken(claim, execution):
            barrier.wait()
            return take(claim, execution)

        monkeypatch.setattr(idempotency, "take", taken)
    results = [None] * count

    def run(index):
        try:
            results[index] = services.start("demo", {"n": 5}, idempotency_key="at-once")
        except Exception as exc:  # noqa: BLE001 - reported by the test
            results[index] = exc
        finally:
            connections.close_all()  # this thread's connection

    threads = [threading.Thread(target=run, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_concurrent_inserts_of_one_key_start_one_execution(monkeypatch, outbox):
    """Two transactions insert the key at the same moment, each having looked and found none: the
    second insert waits for the first transaction and, once it commits, fails on the unique
    constraint; that start answers the first one's execution. (PostgreSQL: SQLite's transactions
    take the one write lock as they begin, so two cannot both be inside one at once, as here.)"""
    results = start_at_once(monkeypatch, "insert")
    assert all(isinstance(result, Execution) for result in results), results
    assert len({result.pk for result in results}) == 1
    assert sorted(result.idempotent_replay for result in results) == [False, True]
    assert Execution.objects.count() == 1 and IdempotencyKey.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_starts_with_one_key_start_one_execution(monkeypatch, outbox):
    """Three starts that all looked for the key before any stored it (on PostgreSQL and SQLite:
    there the transactions take turns, and each after the first fails to insert the key)."""
    results = start_at_once(monkeypatch, "look", count=3)
    assert all(isinstance(result, Execution) for result in results), results
    assert len({result.pk for result in results}) == 1
    assert sorted(result.idempotent_replay for result in results) == [False, True, True]
    assert Execution.objects.count() == 1 and IdempotencyKey.objects.count() == 1
    assert outbox["advance"] == [str(results[0].pk)], "one execution sent"


@pytest.mark.django_db(transaction=True)
def test_concurrent_starts_of_two_requests_with_one_key_start_one_and_refuse_the_other(monkeypatch, outbox):
    barrier = threading.Barrier(2, timeout=20)
    look = idempotency.earlier

    def earlier(claim):
        found = look(claim)
        barrier.wait()
        return found

    monkeypatch.setattr(idempotency, "earlier", earlier)
    results = [None, None]

    def run(index):
        try:
            results[index] = services.start("demo", {"n": index}, idempotency_key="at-once")
        except Exception as exc:  # noqa: BLE001 - reported by the test
            results[index] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    started = [result for result in results if isinstance(result, Execution)]
    refused = [result for result in results if isinstance(result, IdempotencyConflict)]
    assert len(started) == 1 and len(refused) == 1, results
    assert refused[0].execution_id == started[0].pk
    assert Execution.objects.count() == 1


# --- reruns ----------------------------------------------------------------------------------------


def test_a_rerun_with_a_key_is_started_once(db, outbox, make_execution, make_operation):
    original = make_execution(status=ExecutionStatus.FAILED, workflow_id="demo")
    make_operation(execution=original, name="step-a")
    first = services.rerun(original.pk, "step-a", idempotency_key="again-1")
    again = services.rerun(original.pk, "step-a", idempotency_key="again-1")
    assert again.pk == first.pk and again.idempotent_replay and first.rerun_of_id == original.pk
    with pytest.raises(IdempotencyConflict):
        services.rerun(original.pk, "step-a", {"n": 4}, idempotency_key="again-1")
    with pytest.raises(IdempotencyConflict):  # a start is another request than a rerun
        services.start("demo", idempotency_key="again-1")
    assert Execution.objects.filter(rerun_of=original).count() == 1


# --- retention -------------------------------------------------------------------------------------


def test_the_purge_deletes_expired_keys_even_when_it_deletes_no_execution(db, outbox):
    kept = services.start("demo", idempotency_key="fresh")
    old = services.start("demo", idempotency_key="old")
    IdempotencyKey.objects.filter(key="old").update(expires_at=timezone.now() - timedelta(seconds=1))
    counts = retention.purge(30)
    assert counts.executions == 0
    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["fresh"]
    assert left_of(kept, old) == {kept.pk, old.pk}, "the executions stay: only their keys expired"


def test_a_dry_run_purge_deletes_no_key(db, outbox):
    services.start("demo", idempotency_key="old")
    IdempotencyKey.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    retention.purge(30, dry_run=True)
    assert IdempotencyKey.objects.count() == 1


def test_the_purge_deletes_expired_keys_in_one_statement(db, outbox, django_assert_num_queries):
    for n in range(5):
        services.start("demo", idempotency_key=f"old-{n}")
    IdempotencyKey.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    with django_assert_num_queries(1):
        assert idempotency.purge_expired() == 5


@pytest.mark.django_db(transaction=True)
def test_a_purged_execution_takes_its_key_and_the_same_request_starts_anew(outbox):
    """Committed, so that the database checks its foreign keys: the purge deletes executions
    without Django's collector, and must delete their keys itself."""
    first = services.start("demo", idempotency_key="k")
    Execution.objects.filter(pk=first.pk).update(status=ExecutionStatus.COMPLETED,
                                                 ended_at=timezone.now() - timedelta(days=40))
    assert retention.purge(30).executions == 1
    assert not Execution.objects.filter(pk=first.pk).exists() and not IdempotencyKey.objects.exists()
    again = services.start("demo", idempotency_key="k")
    assert not again.idempotent_replay and again.pk != first.pk


def test_an_execution_deleted_in_the_admin_takes_its_key(db, outbox):
    first = services.start("demo", idempotency_key="k")
    Execution.objects.filter(pk=first.pk).update(status=ExecutionStatus.CANCELLED)
    assert retention.delete_executions([first.pk]).executions == 1
    assert not IdempotencyKey.objects.exists()
    assert services.start("demo", idempotency_key="k").pk != first.pk


def left_of(*executions) -> set:
    return set(Execution.objects.filter(pk__in=[e.pk for e in executions]).values_list("pk", flat=True))

