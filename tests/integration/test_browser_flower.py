"""What an operator sees of failures in Flower, in a real browser (Playwright for Python driving
Debian's ``chromium``, as ``test_browser.py``): the bundled ``demo`` workflow runs on a real
manager and agent, and Flower's task list shows its ``charge`` step, which fails for good, as
``FAILURE``, the first attempt of ``flaky``, which the engine retries, as ``RETRY``, and the
attempt that succeeded as ``SUCCESS``; Flower's "Failed" filter finds ``charge``.

Screenshots go under the test's output directory (``<tmp_path>/screenshots``), or
``SWITCHYARD_SCREENSHOTS`` when set."""

import base64
import json
import urllib.request

import pytest
from django.test import override_settings
from playwright.sync_api import expect

from tests.integration.harness import NO_DATABASE_URL, WORKFLOW_MODULES, free_port
from tests.integration.test_browser import browser, screenshots, wait_http  # noqa: F401 — fixtures
from workflows_app import services
from workflows_app.models import Operation
from workflows_app.models.operation import task_id_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FLOWER_USER, FLOWER_PASSWORD = "watcher", "browser-flower-test-password"
#: The bundled examples beside the test workflows, in the test process and in its children.
MODULES = [WORKFLOW_MODULES, "workflows_app.examples"]


def flower_heard(flower, agent) -> bool:
    """Whether Flower lists ``agent``'s worker: its events reach Flower from now on."""
    login = base64.b64encode(f"{FLOWER_USER}:{FLOWER_PASSWORD}".encode()).decode()
    request = urllib.request.Request(f"{flower}/workers?json=1", headers={"Authorization": f"Basic {login}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            workers = json.load(response).get("data", [])
    except OSError:
        return False
    return any(w.get("hostname", "").startswith(f"{agent}@") for w in workers)


def row(page, task_id):
    """The row of Flower's task list whose UUID is ``task_id``."""
    return page.locator("table#tasks-table tbody tr", has=page.locator(f'a[title="{task_id}"]'))


def test_flower_shows_the_demos_declined_charge_as_failure_and_its_flaky_first_attempt_as_retry(
        stack, browser, screenshots, tmp_path):  # noqa: F811 — the fixtures imported above
    flower_port = free_port()
    flower = f"http://127.0.0.1:{flower_port}"
    agent = stack.agent_name("local")
    modules = {"SWITCHYARD_WORKFLOW_MODULES": ",".join(MODULES)}
    stack.manage("manager", "run_manager", "--loglevel", "INFO", env=modules)
    stack.manage(agent, "run_agent", agent, "--concurrency", "2", "--loglevel", "INFO",
                 env={**modules, "DATABASE_URL": NO_DATABASE_URL})
    stack.manage("flower", "run_flower", "--address=127.0.0.1", f"--port={flower_port}",
                 env={**modules, "SWITCHYARD_VAR_DIR": str(tmp_path / "flower"),
                      "FLOWER_BASIC_AUTH": f"{FLOWER_USER}:{FLOWER_PASSWORD}"})
    stack.wait_for_agent(agent)
    wait_http(stack, f"{flower}/healthcheck", "Flower")
    # Flower only knows the events it heard: the demo ends in seconds, so not before Flower listens.
    stack.wait_for(lambda: flower_heard(flower, agent), timeout=120, what="Flower to hear the agent")

    with override_settings(SWITCHYARD_WORKFLOW_MODULES=MODULES):
        execution = services.start("demo", {"agent": agent})
    page = browser.new_page(viewport={"width": 1600, "height": 1000},
                            http_credentials={"username": FLOWER_USER, "password": FLOWER_PASSWORD})
    stack.wait_for_status(execution.pk, "completed", timeout=120)
    ops = {op.name: op for op in Operation.objects.filter(execution_id=execution.pk)}
    assert (ops["charge"].state, ops["flaky"].state, ops["flaky"].attempt) == ("failed", "succeeded", 2)
    charge, flaky_1, flaky_2 = (task_id_for(ops["charge"].pk, 1), task_id_for(ops["flaky"].pk, 1),
                                task_id_for(ops["flaky"].pk, 2))

    def listed():
        page.goto(f"{flower}/tasks")
        page.locator("table#tasks-table tbody tr").first.wait_for(timeout=10_000)
        return all(row(page, i).count() for i in (charge, flaky_1, flaky_2))

    stack.wait_for(listed, timeout=60, what="the demo's charge and flaky attempts in Flower's task list")
    expect(row(page, charge).locator(".badge")).to_have_text("FAILURE", timeout=30_000)
    expect(row(page, charge)).to_contain_text("demo › charge (charge)")
    expect(row(page, flaky_1).locator(".badge")).to_have_text("RETRY")
    expect(row(page, flaky_2).locator(".badge")).to_have_text("SUCCESS")
    page.screenshot(path=str(screenshots / "flower-states.png"), full_page=True)

    # The operator's "Failed" filter lists the declined charge and nothing that succeeded.
    page.click('button.task-state-filter[data-task-state="FAILURE"]')
    expect(row(page, flaky_2)).to_have_count(0, timeout=10_000)
    expect(row(page, charge).locator(".badge")).to_have_text("FAILURE")
    expect(page.locator("table#tasks-table tbody .badge")).to_have_text(["FAILURE"])
    page.screenshot(path=str(screenshots / "flower-failed.png"), full_page=True)

    # A task's own page says what failed.
    page.goto(f"{flower}/task/{charge}")
    expect(page.locator("body")).to_contain_text("NonRecoverableError: card declined for 42")
    page.screenshot(path=str(screenshots / "flower-charge.png"), full_page=True)
