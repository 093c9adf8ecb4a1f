"""Shared fixtures.

Services: a test that needs PostgreSQL is marked ``postgres``. Locally it is skipped when the
configured database is not PostgreSQL; when ``SWITCHYARD_REQUIRE`` names ``postgres`` (CI does)
it fails instead, so a CI that lost its database cannot pass by skipping.
"""

import json
import os
from types import SimpleNamespace

import kombu
import kombu.exceptions
import pytest
from django.core.cache import cache
from django.db import connection

from agents import intake
from agents.worker import link, local
from workflows_app import broker, embedded_redis, signing, wire
from workflows_app.engine import live
from workflows_app.wire import keys
from workflows_app.models import Execution, Operation
from workflows_app.states import ExecutionStatus, OperationState

from tests import parallel, pure

#: The package's own pytest plugin (an installed package registers it through its entry point).
pytest_plugins = ["workflows_app.testing"]

REQUIRED = {s.strip() for s in os.environ.get("SWITCHYARD_REQUIRE", "").split(",") if s.strip()}


def pytest_sessionstart(session):
    """In CI, a service named in SWITCHYARD_REQUIRE must be the one configured and answer."""
    from django.conf import settings

    try:
        parallel.open_broker(settings.CELERY_BROKER_URL)
    except parallel.IsolationError as exc:
        raise pytest.UsageError(str(exc)) from None
    if "postgres" in REQUIRED and settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        raise pytest.UsageError("SWITCHYARD_REQUIRE names postgres, but DATABASE_URL is not PostgreSQL")
    if "redis" in REQUIRED:
        import redis

        if not settings.CELERY_BROKER_URL.startswith("redis://"):
            raise pytest.UsageError("SWITCHYARD_REQUIRE names redis, but CELERY_BROKER_URL is not redis://")
        redis.Redis.from_url(settings.CELERY_BROKER_URL, socket_timeout=5).ping()
    if "rabbitmq" in REQUIRED:
        if not settings.CELERY_BROKER_URL.startswith(("amqp://", "amqps://", "pyamqp://")):
            raise pytest.UsageError("SWITCHYARD_REQUIRE names rabbitmq, but CELERY_BROKER_URL is not amqp://")
        try:
            with kombu.Connection(settings.CELERY_BROKER_URL, connect_timeout=5) as broker:
                broker.ensure_connection(max_retries=1)
        except kombu.exceptions.OperationalError as exc:
            raise pytest.UsageError(f"SWITCHYARD_REQUIRE names rabbitmq, but CELERY_BROKER_URL does not answer: {exc}") from exc


def pytest_sessionfinish(session, exitstatus):
    """The embedded Redis this test run started goes with it, as ``standalone``'s does: a run on
    embedded defaults leaves no server behind. One that was running before is left running."""
    from celery import current_app
    from django.conf import settings

    parallel.close_broker(settings.CELERY_BROKER_URL)
    directory = embedded_redis.var_dir_of(current_app.conf.broker_url or "")
    if directory is not None and embedded_redis.started_here(directory):
        embedded_redis.stop(directory)


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    # Before pytest-xdist reads the groups and `-m` reads the markers.
    parallel.group_shared_fixtures(items)
    pure.classify(items)
    result = yield
    # The slow tests first, after pytest-django's order (a stable sort: otherwise in that order).
    # Side by side, the longest start while the short ones fill the other workers, rather than
    # running alone at the end; every worker collects the same order.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    return result


@pytest.fixture(autouse=True)
def _pure_touches_nothing(request, monkeypatch):
    """A test marked ``pure`` (tests/pure.py) may not connect to a server or start a process."""
    pure.hold(request.node, monkeypatch)


def pytest_runtest_setup(item):
    # Each test's database starts with no agent's key rotated (a flush or a rollback took the
    # last one's salts): the keys this process remembered would prove what no manager accepts.
    signing.forget()
    # The API's throttles count in the default cache, per user id: ids come back after a rollback
    # (SQLite), and a fast run would add up every test's requests under one of them.
    cache.clear()
    if item.get_closest_marker("postgres") and connection.vendor != "postgresql":
        if "postgres" in REQUIRED:
            pytest.fail("SWITCHYARD_REQUIRE names postgres, but DATABASE_URL is not a PostgreSQL database")
        pytest.skip("needs PostgreSQL (set DATABASE_URL=postgres://…)")


@pytest.fixture
def make_execution(db):
    """Create an execution directly in ``status`` (test set-up, not a transition)."""

    def make(status=ExecutionStatus.STARTED, **fields):
        fields.setdefault("workflow_id", "example")
        return Execution.objects.create(status=status, **fields)

    return make


@pytest.fixture
def make_operation(db, make_execution):
    """Create an operation directly in ``state`` (test set-up, not a transition)."""

    def make(state=OperationState.PENDING, execution=None, **fields):
        execution = execution or make_execution()
        fields.setdefault("name", f"step-{Operation.objects.count()}")
        fields.setdefault("operation", "noop")
        fields.setdefault("agent", "management")
        return Operation.objects.create(state=state, execution=execution, **fields)

    return make


@pytest.fixture
def running(make_execution, make_operation):
    """A started execution: ``done`` succeeded, ``busy`` started (attempt 1), ``next`` pending."""
    execution = make_execution(status=ExecutionStatus.STARTED, token_hash="a" * 64)
    make_operation(OperationState.SUCCEEDED, execution, name="done", attempt=1)
    make_operation(OperationState.STARTED, execution, name="busy", attempt=1)
    make_operation(OperationState.PENDING, execution, name="next")
    return execution


@pytest.fixture
def outbox(monkeypatch):
    """What the engine would have sent to the broker, recorded instead: ``outbox["advance"]``
    (execution ids), ``["operation"]`` (step names), ``["revoke"]`` (task ids, terminate),
    ``["kill"]`` (the attempts of each broadcast kill); and the broker's queues hold nothing."""
    sent = {"advance": [], "operation": [], "revoke": [], "kill": []}
    monkeypatch.setattr(broker, "send_advance", lambda pk, workflow_id=None, countdown=None: sent["advance"].append(str(pk)))
    monkeypatch.setattr(broker, "send_operations", lambda ops, grants=None: sent["operation"].extend(op.name for op in ops))
    monkeypatch.setattr(broker, "revoke", lambda ids, terminate=False: sent["revoke"].append((list(ids), terminate)))
    monkeypatch.setattr(broker, "broadcast_kill",
                        lambda pk, attempts=(), dispatcher=False: sent["kill"].append([(str(a), n) for a, n in attempts]))
    # Nothing of the test reached a queue: what a queue of the broker holds is someone else's (a
    # `make start` stopped with messages queued, on the same embedded Redis).
    monkeypatch.setattr(broker, "waiting_messages", lambda queue: 0)
    return sent


class Loopback:
    """An agent process' line to the managers (``agents.worker.link``) that hands what it would
    publish to the managers' intake in this process at once, as JSON both ways: the runner and the
    intake tested together on the test's database, without a broker (the integration tests have one)."""

    def __init__(self):
        self.reports = []

    def report(self, kind, **fields):
        body = json.loads(json.dumps(link.signed(kind, **fields)))
        self.reports.append(body)
        return intake.take([body])

    def started(self, operation_id, attempt, began):
        self.report(wire.Kind.STARTED, operation=str(operation_id), attempt=attempt, pid=os.getpid(), at=began)

    def claim(self, operation_id, attempt, timeout):
        answers = self.report(wire.Kind.CLAIM, operation=str(operation_id), attempt=attempt,
                              pid=os.getpid(), reply_to=wire.reply_queue(local.name(), "here", os.getpid()), id="claim")
        return keys.without_proof(json.loads(json.dumps(answers[0][1]))) if answers else None


@pytest.fixture
def agent_link(monkeypatch):
    """This process as a run of an agent whose reports go straight to the intake (:class:`Loopback`):
    ``agent_link.deliver(operation)`` runs the operation's current attempt as its agent would."""
    loopback = Loopback()
    monkeypatch.setattr(link, "_link", loopback)
    monkeypatch.setenv(local.INCARNATION_ENV, "this-test")

    def deliver(operation, attempt=None):
        """As the agent the operation was sent to, a message of ``attempt`` (its current one) as a
        manager sends it."""
        from agents.runner import run_operation

        attempt = operation.attempt if attempt is None else attempt
        monkeypatch.setenv(local.NAME_ENV, operation.agent)
        args = [str(operation.pk), attempt]
        run_operation.run(*args, proof=keys.prove(signing.agent_key(operation.agent), keys.Purpose.OPERATION, args))

    loopback.deliver = deliver
    return loopback


@pytest.fixture(params=["replay", "live"])
def each_pass(request, monkeypatch):
    """Run a test of the dispatcher twice: every pass replaying the workflow function from the
    top, and each pass going on with the live run the last one kept (``engine.live``) — kept at
    once, as when a pass commits (a test's own transaction never does)."""
    if request.param == "replay":
        monkeypatch.setattr(live, "enabled", lambda: False)
    else:
        monkeypatch.setattr(live, "transaction", SimpleNamespace(on_commit=lambda fn: fn()))
    live.clear()
    yield request.param
    live.clear()
