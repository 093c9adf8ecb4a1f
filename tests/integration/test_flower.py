"""Flower names Switchyard's operations and tells their attempts apart: a real manager, agent and
``manage.py run_flower`` on the test's broker; a workflow of three named steps runs, and one whose
steps fail, are retried and succeed runs on the agent and on the manager, and everything this test knows about their messages it
learns from Flower's HTTP API — the task list, the task-name filter, the search, a task's page and
the workers' counts — never from the messages themselves. Flower asks for the login
``run_flower`` was given."""

import base64

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.integration.harness import free_port
from workflows_app import services
from workflows_app.broker import ADVANCE_TASK
from workflows_app.models import Operation
from workflows_app.models.operation import task_id_for
from workflows_app.states import FailureMode

pytestmark = pytest.mark.integration

#: Flower starts, subscribes to events and hears workers in seconds; a loaded 2-core machine
#: (a whole suite beside it) may take many times that.
TIMEOUT = 120
#: What Flower says of a task's state: the state and when it heard each of its events.
MOMENTS = ("state", "sent", "received", "started", "succeeded", "failed", "retried", "rejected", "revoked", "timestamp")
WORKFLOW, STEPS, OPERATION = "it_chain", ["c00", "c01", "c02"], "it_add"
USER, PASSWORD = "watcher", "a-flower-test-password"


def basic_auth(password):
    return {"Authorization": "Basic " + base64.b64encode(f"{USER}:{password}".encode()).decode()}


class Flower:
    """``manage.py run_flower`` on a free port, its on-disk history in a var directory of this
    test's own (``--db`` is under ``SWITCHYARD_VAR_DIR``), with the login USER, PASSWORD."""

    def __init__(self, stack, var_dir):
        self.stack = stack
        self.port = free_port()
        self.process = stack.manage(
            "flower", "run_flower", "--address=127.0.0.1", f"--port={self.port}",
            env={"SWITCHYARD_VAR_DIR": str(var_dir), "FLOWER_BASIC_AUTH": f"{USER}:{PASSWORD}"})

    def status(self, path, password=None):
        """The HTTP status of ``GET path``, with USER and ``password`` (none: no login); None
        while Flower does not answer yet."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}",
                                         headers={} if password is None else basic_auth(password))
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def get(self, path, **query):
        """The JSON at ``path``, logged in; None while Flower does not answer yet."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else ""),
            headers=basic_auth(PASSWORD))
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.load(response)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def tasks(self, **query) -> dict:
        """``GET /api/tasks``: task id -> task, as Flower lists them."""
        return self.get("/api/tasks", **query) or {}

    def wait_for_worker(self, agent):
        """Until Flower has heard ``agent``'s worker (its events reach Flower from now on)."""
        def heard():
            workers = (self.get("/workers", json=1) or {}).get("data", [])
            return any(w.get("hostname", "").startswith(f"{agent}@") for w in workers)

        self.stack.wait_for(heard, TIMEOUT, f"Flower to hear the worker of {agent}",
                            lambda: self.process.log_tail(60))


def test_flower_names_each_step_and_tells_failed_retried_and_succeeded_attempts_apart(stack, tmp_path):
    stack.start_manager()
    agent = stack.agent_name("host-1")
    stack.start_agent(agent)
    stack.wait_for_agent(agent)
    flower = Flower(stack, tmp_path / "flower-var")
    flower.wait_for_worker(agent)
    # Its pages and its API ask for the login, and answer with it; its health check answers anyone.
    for path in ("/", "/tasks", "/api/tasks", "/api/workers"):
        assert flower.status(path) == 401, path
        assert flower.status(path, password="a-wrong-password") == 401, path
        assert flower.status(path, password=PASSWORD) == 200, path
    assert flower.status("/healthcheck") == 200

    execution = services.start(WORKFLOW, {"n": len(STEPS), "agents": [agent]})
    # Beside it, one step per retry rule (tests.workflows), on the agent and on the manager (a
    # step with no agent): none of their failures stops the others.
    outcomes = {where: services.start("it_outcomes", {"prefix": f"{where}-", "agent": queue},
                                      failure_mode=FailureMode.CONTINUE_WHILE_POSSIBLE.value)
                for where, queue in (("agent", agent), ("manager", None))}
    stack.wait_for_status(execution.pk, "completed", timeout=TIMEOUT)
    ops = {op.name: op for op in Operation.objects.filter(execution_id=execution.pk)}
    assert sorted(ops) == STEPS
    expected = {name: f"{WORKFLOW} › {name} ({OPERATION})" for name in STEPS}

    ids = {name: task_id_for(op.pk, op.attempt) for name, op in ops.items()}

    # The task list: once Flower saw every step succeed, each is listed under its readable name.
    def all_succeeded():
        tasks = flower.tasks()
        return tasks if all(tasks.get(i, {}).get("state") == "SUCCESS" for i in ids.values()) else None

    tasks = stack.wait_for(all_succeeded, TIMEOUT, "Flower to list every step as succeeded",
                           lambda: json.dumps(flower.tasks(), indent=1)[-4000:])
    for name, shadow in expected.items():
        assert ids[name] in [uuid for uuid, t in tasks.items() if t["name"] == shadow], \
            json.dumps(tasks.get(ids[name]), indent=1)
        task = tasks[ids[name]]
        assert task["args"] == f"(execution='{execution.pk}', step='{name}', attempt=1)"
        assert f"'execution': '{execution.pk}'" in task["kwargs"]
        assert f"'workflow': '{WORKFLOW}'" in task["kwargs"] and f"'operation': '{OPERATION}'" in task["kwargs"]
        assert task["worker"].startswith(f"{agent}@")

    # Flower's task-name filter finds one step by its name (of every execution on this broker) ...
    middle = flower.tasks(taskname=expected["c01"])
    assert ids["c01"] in middle and {t["name"] for t in middle.values()} == {expected["c01"]}
    # ... its search finds a step of an execution by the step's name, and every message of it.
    by_step = flower.tasks(search=f"kwargs:step=c02 kwargs:execution={execution.pk}")
    assert list(by_step) == [ids["c02"]] and by_step[ids["c02"]]["name"] == expected["c02"]
    of_execution = flower.tasks(search=f"kwargs:execution={execution.pk}")
    assert set(of_execution) == set(ids.values()), json.dumps(of_execution, indent=1)

    # The manager's advance messages are the engine's plumbing: they send no task event, so
    # Flower's list (bounded: --max_tasks) holds operations only, though the manager ran this
    # execution's start and end.
    names = {t["name"] for t in flower.tasks().values()}
    assert not any(name == ADVANCE_TASK or name.startswith("advance") for name in names), names

    # A task's own page says the same.
    page = flower.get(f"/api/task/info/{ids['c00']}")
    assert page["name"] == expected["c00"] and str(execution.pk) in page["args"]

    # Each attempt is a task of its own, in the state of what the attempt did: RETRY when the
    # engine sent another attempt, FAILURE when the operation failed for good (retries exhausted
    # too), SUCCESS when it succeeded. A manager's pool ends them as an agent's does.
    expected_states = {
        "flaky": ["RETRY", "RETRY", "SUCCESS"],  # RecoverableError twice, then a result
        "nonrecoverable": ["FAILURE"],  # NonRecoverableError: never retried
        "retry_for": ["RETRY", "RETRY", "FAILURE"],  # a ValueError in retry_for, until max_retries=2 ran out
        "plain": ["FAILURE"],  # a ValueError not in retry_for
    }
    for where, outcome in outcomes.items():
        stack.wait_for_status(outcome.pk, "failed", timeout=TIMEOUT)
        ops = {op.name: op for op in Operation.objects.filter(execution_id=outcome.pk)}
        attempts = {task_id_for(ops[name].pk, n): state
                    for name, states in expected_states.items() for n, state in enumerate(states, 1)}

        def all_ended():
            tasks = flower.tasks(search=f"kwargs:execution={outcome.pk}")
            return tasks if all(tasks.get(i, {}).get("state") in ("SUCCESS", "FAILURE", "RETRY") for i in attempts) else None

        def seen():  # each attempt as Flower has it: its state and the moments it heard of
            tasks = flower.tasks(search=f"kwargs:execution={outcome.pk}")
            return json.dumps({i: {key: value for key, value in tasks.get(i, {}).items() if key in MOMENTS}
                               for i in attempts}, indent=1)

        tasks = stack.wait_for(all_ended, TIMEOUT, f"Flower to see every attempt on the {where} end", seen)
        assert {i: tasks[i]["state"] for i in attempts} == attempts, where
        # Only the engine's attempts: Celery sent no message of its own for a retry.
        assert set(tasks) == set(attempts), json.dumps(tasks, indent=1)
        assert len(stack.invocations(f"{where}-flaky")) == 3
        worker = agent if where == "agent" else "manager-"
        assert all(t["worker"].startswith(worker) for t in tasks.values()), (where, {t["worker"] for t in tasks.values()})
        # A failure says what failed, on one line; so does a retried attempt.
        assert tasks[task_id_for(ops["nonrecoverable"].pk, 1)]["exception"] == \
            f"AttemptFailed('NonRecoverableError: {where}-nonrecoverable: never retried')"
        assert tasks[task_id_for(ops["retry_for"].pk, 1)]["exception"] == \
            f"AttemptFailed('ValueError: {where}-retry_for: retried, it is in retry_for')"

    # The agent's counts, as Flower's dashboard shows them: three failed tasks, four retried.
    def counts():
        workers = (flower.get("/workers", json=1) or {}).get("data", [])
        mine = [w for w in workers if w.get("hostname", "").startswith(f"{agent}@")]
        return mine[0] if mine and mine[0].get("task-failed") == 3 else None

    worker = stack.wait_for(counts, TIMEOUT, "Flower to count the agent's failed tasks",
                            lambda: json.dumps((flower.get("/workers", json=1) or {}), indent=1)[-4000:])
    assert (worker["task-failed"], worker["task-retried"]) == (3, 4)
    assert worker["task-succeeded"] == len(STEPS) + 1
