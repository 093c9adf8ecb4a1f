"""A database outage is ridden out: PostgreSQL — a cluster of the test's own — is stopped while
operations run on agents and on a manager, while dispatchers advance, while an execution is being
cancelled, and while clients start and cancel executions through the API.

* agents have no database: an operation that finishes meanwhile reports to the broker, and its
  report is stored once the database is back: nothing that finished runs again, every step runs
  on attempt 1;
* an agent runs on what it was granted (a first delivery whose grant runs asks no one), nothing
  runs twice, and what needs a manager's answer or a manager's pass waits for the database;
* the API answers 503 ``database_unavailable`` (with ``Retry-After``), not a 500 or a hang;
* the managers live on, say once that the database went away and once that it came back, and
  recover their connections on their own; the agents never notice;
* past ``DATABASE_OUTAGE_TOLERANCE`` a manager says so loudly and gives the reports it holds back
  to the queue, where they wait for the database: still nothing is lost or runs twice.
"""

import time

import pytest
from django.db import connection
from rest_framework.test import APIClient

from tests.api.conftest import OPERATOR, make_user
from tests.integration.harness import describe_execution
from workflows_app import broker, services
from workflows_app.models import Event, Execution, Operation

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(240)]

API = "/api/v1"


def up(stack, concurrency=2):
    stack.start_manager()
    agent = stack.agent_name("db")
    stack.start_agent(agent, concurrency=concurrency)
    stack.wait_for_agent(agent)
    return agent


def api_client():
    user = make_user("ops", OPERATOR)
    client = APIClient()
    client.force_authenticate(user)  # no database needed to authenticate while it is down
    return client


def assert_database_unavailable(response):
    assert response.status_code == 503, (response.status_code, response.content)
    assert response.json()["error_code"] == "database_unavailable", response.json()
    assert response["Retry-After"] == "5"


def wait_until_started(stack, tags, timeout=60):
    stack.wait_for(lambda: all(stack.invocations(tag) for tag in tags), timeout, f"{tags} to start")


#: The steps of the three it_outage executions.
STEPS = [f"e{i}:{name}" for i in range(3) for name in ("a0", "a1", "m", "after")]


def invocations(stack) -> dict:
    """How many times each step began."""
    return {tag: len(stack.invocations(tag)) for tag in STEPS}


def back(cluster):
    """Start the cluster again, and give the test process a new connection."""
    cluster.start()
    connection.close()


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_a_database_restart_while_work_is_in_flight_loses_no_result_and_runs_nothing_twice(own_postgres, stack, mode):
    agent = up(stack)
    client = api_client()
    # Three executions: six 3 s steps for an agent that runs two at a time (four wait in its
    # queue), three on the manager; one execution whose step runs until it sees a cancel.
    stoppable = services.start("it_stoppable", {"agent": agent, "seconds": 60.0})
    wait_until_started(stack, ["running"])
    executions = [services.start("it_outage", {"agent": agent, "prefix": f"e{i}", "seconds": 3.0}) for i in range(3)]
    wait_until_started(stack, ["e0:m", "e1:m", "e2:m"])
    stack.wait_for(lambda: Operation.objects.filter(execution__in=executions, agent=agent, state="started").count() == 1,
                   30, "the agent to run one sleeping step beside the stoppable one")
    services.cancel(stoppable.pk)  # the cancel is stored; the running step sees it after the outage

    own_postgres.stop(mode)
    down_at = time.monotonic()
    assert broker.waiting_messages(agent) >= 1
    assert_database_unavailable(client.post(f"{API}/executions", {"workflow_id": "it_outage",
                                                                   "parameters": {"agent": agent, "prefix": "new"}}, format="json"))
    assert_database_unavailable(client.post(f"{API}/executions/{executions[0].pk}", {"action": "cancel"}, format="json"))
    assert_database_unavailable(client.get(f"{API}/executions/{executions[0].pk}"))
    # The steps running now finish while the database is down; the agent goes on with what its
    # queue holds (granted: it asks no one); nothing runs twice, and no step that waits for others
    # (a manager's pass, on the database) begins.
    while time.monotonic() - down_at < 6:
        time.sleep(0.5)
        ran = invocations(stack)
        assert max(ran.values()) <= 1, f"a step ran twice while the database was down: {ran}"
        assert not [name for name, count in ran.items() if name.endswith(":after") and count], ran
    back(own_postgres)

    for i, execution in enumerate(executions):
        done = stack.wait_for_status(execution.pk, "completed", timeout=120)
        assert done.payload == {"results": [f"e{i}:a0", f"e{i}:a1", f"e{i}:m"], "after": 3}, describe_execution(execution.pk)
    stack.wait_for_status(stoppable.pk, "cancelled", timeout=60)
    assert stack.invocations("running-saw-cancel"), describe_execution(stoppable.pk)  # once the database was back

    for prefix in ("e0", "e1", "e2"):
        for name in ("a0", "a1", "m", "after"):
            runs = stack.invocations(f"{prefix}:{name}")
            assert [run["attempt"] for run in runs] == [1], f"{prefix}:{name} ran {runs}"
    assert set(Operation.objects.filter(execution__in=executions).values_list("attempt", flat=True)) == {1}

    stack.check_processes()  # nothing died, nothing crash-looped
    for proc in stack.processes:
        log = proc.log_text()
        if "run_agent" in proc.argv:
            assert "database" not in log.lower(), f"agent {proc.name} has no database to lose:\n{proc.log_tail(80)}"
        else:
            assert "database unavailable" in log and "database back after" in log, f"{proc.name} said nothing of it:\n{proc.log_tail(80)}"
        assert "gave up" not in log

    # The API works again, on new connections.
    response = client.post(f"{API}/executions", {"workflow_id": "it_outage", "parameters": {"agent": agent, "prefix": "new"}},
                           format="json")
    assert response.status_code == 201, response.content
    stack.wait_for_status(response.json()["id"], "completed", timeout=60)


def test_an_outage_longer_than_the_tolerance_is_logged_loudly_and_loses_nothing(own_postgres, stack):
    stack.configure(DATABASE_OUTAGE_TOLERANCE=3)
    agent = up(stack, concurrency=1)
    execution = services.start("it_single", {"agent": agent, "tag": "long", "seconds": 2.0})
    wait_until_started(stack, ["long"])
    own_postgres.stop("fast")
    time.sleep(9)  # the step ends 2 s in; the manager holding its report gives up after 3 s, and again
    back(own_postgres)

    done = stack.wait_for_status(execution.pk, "completed", timeout=90)
    assert done.payload == {"result": "long"}
    assert [run["attempt"] for run in stack.invocations("long")] == [1], "its report waited in the broker: not run again"
    assert Operation.objects.get(execution=execution, name="long").attempt == 1
    manager_log = next(p for p in stack.processes if "run_manager" in p.argv).log_text()
    assert "CRITICAL" in manager_log and "gave up" in manager_log, manager_log[-3000:]
    stack.check_processes()
    assert Execution.objects.get(pk=execution.pk).status == "completed"
