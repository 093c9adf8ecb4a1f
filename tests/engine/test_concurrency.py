"""Concurrency limits (``engine.concurrency``): at most N active executions per key, the others
``queued`` and started in the order they were created; the deployment lock (one active execution
per ``deployment_id``: a second one refused, queued or forced) is the case of limit 1.

On the database alone: what follows a commit (the reactions that promote queued executions, the
start messages) runs as the test's on-commit callbacks, and the messages land in ``outbox``.
"""

import threading

import pytest
from django.db import connection, transaction

from tests import concurrency_workflows as cw
from workflows_app import registry, services
from workflows_app.engine import concurrency
from workflows_app.errors import ExistingRunningExecution, ParameterError, RegistrationError
from workflows_app.models import ConcurrencyKey, Execution
from workflows_app.states import ExecutionStatus
from workflows_app.transitions import execution_transition


@pytest.fixture
def run(db, outbox, django_capture_on_commit_callbacks):
    """``run(fn, ...)``: call it with what follows its commits done (reactions; messages to ``outbox``)."""

    def call(fn, *args, **kwargs):
        with django_capture_on_commit_callbacks(execute=True):
            return fn(*args, **kwargs)

    return call


@pytest.fixture
def start(run):
    def start_one(workflow_id, parameters=None, **options):
        return run(services.start, workflow_id, parameters, **options)

    return start_one


@pytest.fixture
def finish(run):
    """``finish(execution)``: it runs and completes (``pending`` → ``started`` → ``completed``)."""

    def finish_one(execution):
        def complete():
            with transaction.atomic():
                current = Execution.objects.select_for_update().get(pk=execution.pk)
                if current.status == ExecutionStatus.PENDING:
                    current = execution_transition(current, ExecutionStatus.STARTED)
                execution_transition(current, ExecutionStatus.COMPLETED)

        run(complete)

    return finish_one


@pytest.fixture
def restore_registration(monkeypatch):
    """The registration of ``cc_per_customer`` as it was, after the test (which re-registers it)."""
    monkeypatch.setitem(registry._workflows, "cc_per_customer", registry._workflows["cc_per_customer"])


def statuses(executions):
    found = dict(Execution.objects.filter(pk__in=[e.pk for e in executions]).values_list("pk", "status"))
    return [found[e.pk] for e in executions]


def admitted(workflow_id):
    return Execution.objects.filter(workflow_id=workflow_id, status__in=["pending", "started"]).count()


# --- the deployment lock ---------------------------------------------------------------------

@pytest.fixture
def first(start):
    return start("demo", deployment_id="site-1")


def test_a_second_execution_of_a_busy_deployment_is_refused_and_nothing_is_stored(first, start, outbox):
    with pytest.raises(ExistingRunningExecution) as refused:
        start("demo", deployment_id="site-1")
    assert str(first.pk) in str(refused.value) and "site-1" in str(refused.value)
    assert Execution.objects.count() == 1 and outbox["advance"] == [str(first.pk)]


def test_queued_executions_start_in_order_when_the_deployment_is_free(first, start, finish, outbox):
    second = start("demo", deployment_id="site-1", queue=True)
    third = start("demo", deployment_id="site-1", queue=True)
    assert statuses([second, third]) == ["queued", "queued"] and outbox["advance"] == [str(first.pk)]
    assert concurrency.start_next(concurrency.Key.of_deployment("site-1")) == [], "the first still holds it"

    finish(first)
    assert statuses([second, third]) == ["pending", "queued"] and outbox["advance"][-1] == str(second.pk)
    assert concurrency.start_next(concurrency.Key.of_deployment("site-1")) == [], "the second holds it now"
    finish(second)
    assert statuses([third]) == ["pending"]


def test_force_runs_beside_the_active_execution_and_other_deployments_are_free(first, start):
    forced = start("demo", deployment_id="site-1", force=True)
    other = start("demo", deployment_id="site-2")
    free = start("demo")
    assert statuses([forced, other, free]) == ["pending"] * 3


def test_a_start_without_queue_is_refused_while_executions_wait_for_the_deployment(first, start, run):
    """A deployment freed whose queued execution has not started yet (its promotion was lost) is
    still taken: a new start does not go ahead of the waiting one."""
    waiting = start("demo", deployment_id="site-1", queue=True)
    with transaction.atomic():  # the first ends, and nothing follows its commit: a lost promotion
        execution_transition(Execution.objects.get(pk=first.pk), ExecutionStatus.CANCELLED)
    with pytest.raises(ExistingRunningExecution) as refused:
        start("demo", deployment_id="site-1")
    assert str(waiting.pk) in str(refused.value)
    latest = start("demo", deployment_id="site-1", queue=True)
    assert statuses([waiting, latest]) == ["queued", "queued"]
    run(concurrency.start_every_free_key)  # the tick's safety net
    assert statuses([waiting, latest]) == ["pending", "queued"]


def test_the_deployment_lock_holds_against_starts_at_the_same_moment(transactional_db, outbox):
    started = _at_once(12, lambda i: services.start("cc_free", deployment_id="site-race", queue=True))
    assert sorted(e.status for e in _fresh(started)) == ["pending"] + ["queued"] * 11


# --- registration ----------------------------------------------------------------------------

@pytest.mark.parametrize("options, says", [
    ({"concurrency": 0}, "concurrency must be a whole number of 1 or more"),
    ({"concurrency": -2}, "not -2"),
    ({"concurrency": True}, "not True"),
    ({"concurrency": 1.5}, "not 1.5"),
    ({"concurrency": "3"}, "not '3'"),
    ({"concurrency_key": "customer"}, "concurrency_key='customer' needs concurrency"),
    ({"concurrency": 2, "concurrency_key": "colour"},
     "one of its parameters (customer, size) or 'deployment', not 'colour'"),
    ({"concurrency": 2, "concurrency_key": 3}, "not 3"),
    ({"concurrency": 2, "concurrency_key": "ctx"}, "not 'ctx'"),
])
def test_a_limit_that_makes_no_sense_is_refused_at_registration(options, says):
    def provision(ctx, customer, size=1):
        pass

    with pytest.raises(RegistrationError) as refused:
        registry.workflow(name="cc_refused", **options)(provision)
    assert says in str(refused.value)
    assert "cc_refused" not in registry._workflows


def test_deployment_as_the_key_and_as_a_parameter_is_refused_as_ambiguous():
    def upgrade(ctx, deployment):
        pass

    with pytest.raises(RegistrationError, match="names both the deployment and a parameter"):
        registry.workflow(name="cc_ambiguous", concurrency=1, concurrency_key="deployment")(upgrade)


# --- the key ---------------------------------------------------------------------------------

def test_the_key_names_the_workflow_the_parameter_and_its_value(start):
    assert start("cc_per_customer", {"customer": "acme"}).concurrency_key == 'cc_per_customer:customer="acme"'
    assert start("cc_per_customer", {"customer": {"b": 1, "a": [1, None]}}).concurrency_key == \
        'cc_per_customer:customer={"a":[1,null],"b":1}'
    assert start("cc_whole", {"n": 4}).concurrency_key == "cc_whole"
    assert start("cc_region_default").concurrency_key == 'cc_region_default:region="eu"', "the default counts"
    assert start("cc_per_deployment", deployment_id="d1").concurrency_key == 'cc_per_deployment:deployment="d1"'
    assert start("cc_per_deployment").concurrency_key == "cc_per_deployment:deployment=null"
    assert start("cc_free").concurrency_key == "" and start("demo").concurrency_key == ""
    stored = Execution.objects.filter(workflow_id="cc_per_customer").values_list("concurrency_key", flat=True)
    assert 'cc_per_customer:customer="acme"' in stored


def test_a_long_value_makes_a_bounded_key_that_still_tells_values_apart(start):
    one = start("cc_per_customer", {"customer": "x" * 3000 + "1"})
    two = start("cc_per_customer", {"customer": "x" * 3000 + "2"})
    again = start("cc_per_customer", {"customer": "x" * 3000 + "1"})
    assert len(one.concurrency_key) == len(two.concurrency_key) == 255
    assert one.concurrency_key.startswith('cc_per_customer:customer="xxx') and "sha256:" in one.concurrency_key
    assert one.concurrency_key != two.concurrency_key and one.concurrency_key == again.concurrency_key
    assert statuses([one, two, again]) == ["pending", "pending", "pending"], "limit 2 per value"
    third = start("cc_per_customer", {"customer": "x" * 3000 + "1"})
    assert statuses([third]) == ["queued"]


def test_a_value_that_cannot_make_a_key_is_refused_as_the_start_s_parameters(start, monkeypatch):
    monkeypatch.setitem(registry._workflows, "cc_unkeyable", None)

    @registry.workflow(name="cc_unkeyable", concurrency=1, concurrency_key="since")
    def unkeyable(ctx, since=object()):
        pass

    with pytest.raises(ParameterError, match="parameter 'since' is the concurrency key of workflow 'cc_unkeyable'"):
        start("cc_unkeyable")
    assert start("cc_unkeyable", {"since": "2030"}).status == "pending"
    assert Execution.objects.filter(workflow_id="cc_unkeyable").count() == 1


# --- the limit -------------------------------------------------------------------------------

def test_at_most_n_run_and_the_others_start_in_the_order_they_were_created(start, finish, outbox):
    executions = [start("cc_whole", {"n": i}) for i in range(6)]
    assert statuses(executions) == ["pending"] * 2 + ["queued"] * 4
    assert outbox["advance"] == [str(e.pk) for e in executions[:2]], "the queued ones are not sent"
    for left in range(6, 0, -1):
        # The newest running one ends first: which one ends does not change who starts next.
        running = [e for e, status in zip(executions, statuses(executions)) if status == "pending"]
        assert len(running) == min(2, left)
        finish(running[-1])
    assert outbox["advance"] == [str(e.pk) for e in executions], "each sent once, in the order they were created"
    assert statuses(executions) == ["completed"] * 6


def test_the_limit_counts_per_key_value_so_customers_do_not_block_each_other(start, finish):
    acme = [start("cc_per_customer", {"customer": "acme"}) for _ in range(3)]
    globex = [start("cc_per_customer", {"customer": "globex"}) for _ in range(2)]
    assert statuses(acme) == ["pending", "pending", "queued"] and statuses(globex) == ["pending", "pending"]
    finish(globex[0])
    assert statuses(acme)[2] == "queued", "another customer's slot is not acme's"
    finish(acme[0])
    assert statuses(acme)[2] == "pending"


def test_a_cancelled_queued_execution_ends_at_once_and_the_others_keep_their_order(start, finish, run):
    executions = [start("cc_whole") for _ in range(5)]
    cancelled = run(services.cancel, executions[3].pk)
    assert cancelled.status == "cancelled" and statuses(executions) == ["pending", "pending", "queued", "cancelled",
                                                                         "queued"]
    finish(executions[0])
    assert statuses(executions)[2:] == ["pending", "cancelled", "queued"]
    finish(executions[1])
    assert statuses(executions)[2:] == ["pending", "cancelled", "pending"]
    assert ExecutionStatus.CANCELLED in [e.status for e in _fresh(executions)]


def test_a_start_never_goes_ahead_of_a_queued_one_even_when_a_slot_looks_free(start, run):
    executions = [start("cc_whole") for _ in range(3)]
    with transaction.atomic():  # the first ends and nothing follows its commit: a lost promotion
        execution_transition(Execution.objects.get(pk=executions[0].pk), ExecutionStatus.CANCELLED)
    late = start("cc_whole")
    assert statuses(executions[1:] + [late]) == ["pending", "queued", "queued"]
    run(concurrency.start_every_free_key)
    assert statuses(executions[1:] + [late]) == ["pending", "pending", "queued"]


def test_a_limit_raised_starts_more_and_a_limit_lowered_lets_the_running_ones_finish(
        start, finish, run, restore_registration):
    executions = [start("cc_per_customer", {"customer": "acme"}) for _ in range(7)]
    assert statuses(executions) == ["pending"] * 2 + ["queued"] * 5

    cw.register(4)  # the code deployed with a higher limit: the tick starts two more, in order
    run(concurrency.start_every_free_key)
    assert statuses(executions) == ["pending"] * 4 + ["queued"] * 3

    cw.register(1)  # lowered: none is stopped, none starts until fewer than 1 run
    for ended in range(3):
        finish(executions[ended])
        run(concurrency.start_every_free_key)
        assert statuses(executions)[4:] == ["queued"] * 3, f"{3 - ended} still run"
    finish(executions[3])
    assert statuses(executions)[4:] == ["pending", "queued", "queued"]

    monkey = registry._workflows["cc_per_customer"]
    registry._workflows["cc_per_customer"] = registry.WorkflowDef(name="cc_per_customer", func=cw.per_customer)
    try:  # the limit removed: every one waiting starts
        run(concurrency.start_every_free_key)
        assert statuses(executions)[4:] == ["pending"] * 3
    finally:
        registry._workflows["cc_per_customer"] = monkey


# --- a workflow's limit and its deployment's lock, together ------------------------------------

def test_both_must_hold_and_one_waiting_for_its_deployment_keeps_its_place(start, finish, run):
    holder = start("cc_free", deployment_id="site-1")
    first = start("cc_whole")
    behind_deployment = start("cc_whole", deployment_id="site-1", queue=True)
    assert statuses([first, behind_deployment]) == ["pending", "queued"]
    assert "queued behind" in _last_message(behind_deployment)
    later = start("cc_whole")
    assert statuses([later]) == ["queued"], "a start does not go ahead of a queued one"

    finish(first)  # two slots: one kept for the one waiting for its deployment, one for the next
    assert statuses([behind_deployment, later]) == ["queued", "pending"]
    finish(holder)
    assert statuses([behind_deployment]) == ["pending"]
    assert "a slot of cc_whole is free" in _last_message(behind_deployment)


def test_a_busy_deployment_refuses_a_start_without_queue_whatever_the_workflow_s_limit(start):
    start("cc_free", deployment_id="site-1")
    with pytest.raises(ExistingRunningExecution):
        start("cc_whole", deployment_id="site-1")
    start("cc_whole")
    start("cc_whole")
    with pytest.raises(ExistingRunningExecution):
        start("cc_whole", deployment_id="site-1")
    assert Execution.objects.filter(workflow_id="cc_whole").count() == 2


def test_force_passes_the_deployment_lock_but_not_the_workflow_s_limit(start, finish):
    holder = start("cc_free", deployment_id="site-1")
    running = [start("cc_whole"), start("cc_whole")]
    forced = start("cc_whole", deployment_id="site-1", force=True)
    assert statuses([forced]) == ["queued"] and "no free slot" in _last_message(forced)
    finish(running[0])
    assert statuses([holder, forced]) == ["pending", "pending"], "it started beside the deployment's holder"


def test_a_limit_per_deployment_counts_forced_starts_and_those_without_a_deployment(start, finish):
    one = start("cc_per_deployment", deployment_id="d1")
    forced = start("cc_per_deployment", deployment_id="d1", force=True)
    other = start("cc_per_deployment", deployment_id="d2")
    nowhere = [start("cc_per_deployment"), start("cc_per_deployment")]
    assert statuses([one, forced, other, *nowhere]) == ["pending", "queued", "pending", "pending", "queued"]
    finish(one)
    assert statuses([forced]) == ["pending"]


# --- at the same moment, from many processes -----------------------------------------------------

def _at_once(count, work):
    """``work(i)`` in ``count`` threads released together (each with its own connection); what
    each returned, in the order of ``i``. An exception in one is raised here."""
    barrier, results, errors = threading.Barrier(count), [None] * count, []

    def one(i):
        try:
            barrier.wait(timeout=30)
            results[i] = work(i)
        except Exception as exc:  # raised in the test's thread below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    if errors:
        raise errors[0]
    return results


def _fresh(executions):
    by_pk = Execution.objects.in_bulk([e.pk for e in executions])
    return [by_pk[e.pk] for e in executions]


@pytest.mark.django_db(transaction=True)
def test_starts_and_ends_at_the_same_moment_never_admit_more_than_the_limit(outbox):
    """On PostgreSQL the threads' transactions run at once and the key's row lock orders them;
    on SQLite each write transaction takes the database's lock as it begins (``IMMEDIATE``), so
    they run one after the other: the same assertions hold on both."""
    started = _at_once(16, lambda i: services.start("cc_whole", {"n": i}))
    assert sorted(e.status for e in _fresh(started)) == ["pending"] * 2 + ["queued"] * 14

    def end_or_sweep(i, running):
        if i < len(running):
            with transaction.atomic():
                execution = Execution.objects.select_for_update().get(pk=running[i])
                execution_transition(execution, ExecutionStatus.CANCELLED)
        else:  # the tick of other managers, at the same moment
            concurrency.start_every_free_key()

    for left in range(16, 0, -2):
        running = list(Execution.objects.filter(workflow_id="cc_whole", status="pending").values_list("pk", flat=True))
        assert len(running) == min(2, left)
        _at_once(4, lambda i: end_or_sweep(i, running))
        assert admitted("cc_whole") == min(2, left - 2)
    assert ConcurrencyKey.objects.filter(key="cc_whole").count() == 1


# --- helpers -----------------------------------------------------------------------------------

def _last_message(execution):
    return execution.events.order_by("-id").values_list("message", flat=True).first()
