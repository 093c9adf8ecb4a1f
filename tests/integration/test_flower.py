"""Flower names Switchyard's operations: a real manager, agent and ``manage.py
run_flower`` on the test's broker; a workflow of three named steps runs, and everything this
test knows about its messages it learns from Flower's HTTP API — the task list, the task-name
filter, the search and a task's page — never from the messages themselves. Flower asks for the
login ``run_flower`` was given."""

import base64

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.integration.harness import free_port
from workflows_app import services
from workflows_app.dispatch import ADVANCE_TASK
from workflows_app.models import Operation
from workflows_app.models.operation import task_id_for

pytestmark = pytest.mark.integration

#: Flower starts, subscribes to events and hears workers in seconds; a loaded 2-core machine
#: (a whole suite beside it) may take many times that.
TIMEOUT = 120
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


def test_flower_lists_each_step_under_its_workflow_step_and_operation(stack, tmp_path):
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
