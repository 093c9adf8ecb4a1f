"""The test suite's own rules: what a pytest-xdist worker keeps to itself (``tests/parallel.py``)
and which tests are ``pure``, run by one set-up only (``tests/pure.py``)."""

import socket
import subprocess
import sys
from types import SimpleNamespace

import pytest

from tests import parallel, pure


def test_each_worker_gets_a_var_directory_a_redis_database_and_a_virtual_host_of_its_own(monkeypatch, tmp_path):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw2")
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", "0123456789abcdef")
    environ = {"SWITCHYARD_VAR_DIR": str(tmp_path), "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
               "CELERY_RESULT_BACKEND": "redis://:secret@127.0.0.1:6379/4"}
    parallel.isolate(environ)
    assert environ["SWITCHYARD_VAR_DIR"] == str(tmp_path / "workers" / "gw2")
    assert environ["CELERY_BROKER_URL"] == "redis://127.0.0.1:6379/3"
    assert environ["CELERY_RESULT_BACKEND"] == "redis://:secret@127.0.0.1:6379/7"
    # A process a test starts inherits that environment (and the worker's id): it stays put.
    again = dict(environ)
    parallel.isolate(again)
    assert again == environ

    rabbit = {"CELERY_BROKER_URL": "amqp://guest:guest@127.0.0.1:5672//"}
    parallel.isolate(rabbit)
    assert rabbit["CELERY_BROKER_URL"] == "amqp://guest:guest@127.0.0.1:5672/switchyard-test-01234567-gw2"

    embedded = {}  # the embedded defaults: no broker variable, a var directory of the worker's own
    parallel.isolate(embedded)
    assert "CELERY_BROKER_URL" not in embedded and embedded["SWITCHYARD_VAR_DIR"].endswith("/workers/gw2")


def test_outside_a_parallel_run_nothing_moves(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    environ = {"CELERY_BROKER_URL": "redis://127.0.0.1:6379/0"}
    parallel.isolate(environ)
    assert environ == {"CELERY_BROKER_URL": "redis://127.0.0.1:6379/0"}


def test_more_workers_than_redis_has_databases_is_a_clear_error():
    with pytest.raises(parallel.IsolationError, match="Redis database 16"):
        parallel.redis_url("redis://127.0.0.1:6379/0", "gw15")


class Collected:
    """What the rules read of a collected test: its id, the fixtures it reaches, its markers."""

    def __init__(self, fixtures=(), markers=(), nodeid="tests/a.py::test_a", scopes=None):
        self.fixturenames, self.markers, self.nodeid = list(fixtures), set(markers), nodeid
        self.groups = []
        self._fixtureinfo = SimpleNamespace(name2fixturedefs={
            name: [SimpleNamespace(baseid=baseid, scope=scope)] for name, (baseid, scope) in (scopes or {}).items()})

    def get_closest_marker(self, name):
        return name if name in self.markers else None

    def add_marker(self, mark):
        self.markers.add(mark.name)
        if mark.name == "xdist_group":
            self.groups.append(mark.args[0])


def test_a_test_is_pure_exactly_when_it_asks_for_no_database_no_process_and_no_service():
    computes = Collected(fixtures=["tmp_path", "monkeypatch"])
    tests = [computes, Collected(fixtures=["admin_client", pure.DATABASE_FIXTURE]), Collected(markers=["django_db"]),
             Collected(markers=["integration"]), Collected(markers=["processes"])]
    pure.classify(tests)
    assert ["pure" in test.markers for test in tests] == [True, False, False, False, False]


def test_the_tests_that_share_a_fixture_built_once_per_module_run_on_one_worker():
    shared = {"wheel": ("tests/b.py", "module")}
    tests = [Collected(nodeid="tests/b.py::test_one", scopes=shared),
             Collected(nodeid="tests/b.py::Case::test_two", scopes={"case": ("tests/b.py", "class")}),
             Collected(nodeid="tests/c.py::test_three", scopes={"db": ("tests", "function")}),
             # A plugin's fixture (no baseid) or one per session: every worker has its own anyway.
             Collected(nodeid="tests/d.py::test_four", scopes={"anyio_backend": ("", "module"), "s": ("tests", "session")})]
    parallel.group_shared_fixtures(tests)
    assert [test.groups for test in tests] == [["tests/b.py"], ["tests/b.py"], [], []]


def test_every_fixture_of_the_database_reaches_the_one_the_rule_looks_for(request, admin_client, transactional_db):
    assert pure.DATABASE_FIXTURE in request.node.fixturenames
    assert not request.node.get_closest_marker("pure")


@pytest.mark.processes  # so that the suite's own hold is not on this test: it puts one on by hand
def test_a_pure_test_that_connects_or_starts_a_process_fails_with_the_marker_it_needs(request):
    server = socket.create_server(("127.0.0.1", 0))
    item = request.node
    item.add_marker(pytest.mark.pure)
    with pytest.MonkeyPatch.context() as monkeypatch:
        pure.hold(item, monkeypatch)
        with pytest.raises(pytest.fail.Exception, match="connects to a server: mark it `integration`"):
            socket.create_connection(server.getsockname(), timeout=5)
        with pytest.raises(pytest.fail.Exception, match="starts a process: mark it `processes`"):
            subprocess.run([sys.executable, "-c", ""])
    socket.create_connection(server.getsockname(), timeout=5).close()  # let go once the test ends
    server.close()


@pytest.mark.processes
@pytest.mark.parametrize("workers", ["0", "3"])
def test_make_test_and_test_fast_run_as_many_workers_as_WORKERS_says(workers):
    for target in ("test", "test-fast"):
        dry = subprocess.run(["make", "-n", target, f"WORKERS={workers}"], cwd=parallel.ROOT,
                             capture_output=True, text=True, timeout=60)
        assert dry.returncode == 0, dry.stderr
        [pytest_line] = [line for line in dry.stdout.splitlines() if "-m pytest" in line]
        assert f"-n {workers} --dist loadgroup" in pytest_line, pytest_line
