"""The operators' console in a real browser: Playwright for Python driving Debian's
``chromium`` against a real web server, manager, agent and Flower.

An operator logs in, starts a workflow from the admin's start form, watches its page while it
runs — the graph's boxes change colour as operations end — presses Cancel and sees the status
become ``cancelled``; then logs in to Flower and finds the workflow's steps by name in its task
list. Screenshots go under the test's output directory (``<tmp_path>/screenshots``), or
``SWITCHYARD_SCREENSHOTS`` when set (README's pictures come from there).

Chromium is Debian's package: the test installs it with apt when it is missing, never a
downloaded browser build, and fails (does not skip) when it cannot run one.
"""

import json
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connections
from playwright.sync_api import expect, sync_playwright

from tests.integration.harness import free_port
from workflows_app import services
from workflows_app.models import Execution

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PASSWORD = "browser-test-password"
#: Flower's login (``FLOWER_BASIC_AUTH``): it asks for one.
FLOWER_USER, FLOWER_PASSWORD = "watcher", "browser-test-flower-password"
#: The colours admin.css gives the boxes of these states.
STARTED_FILL, SUCCEEDED_FILL = "rgb(31, 111, 235)", "rgb(26, 127, 55)"


def debian_chromium() -> str:
    """Debian's chromium, installed with apt when missing; the test fails when there is none."""
    found = shutil.which("chromium")
    if found is None and shutil.which("apt-get"):
        subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], capture_output=True, timeout=600)
        found = shutil.which("chromium")
    if found is None:
        pytest.fail("Debian's chromium is not installed and apt-get could not install it")
    return found


@pytest.fixture
def browser(monkeypatch):
    # Playwright's sync API runs an asyncio loop in this thread; Django then refuses the test's
    # own (synchronous) queries unless told that this loop is not one it runs code in.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=debian_chromium(), args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()
            # The test's own queries ran inside Playwright's loop, which Django's connection
            # handling sees as another context with a connection of its own: closed here.
            connections.close_all()


@pytest.fixture
def screenshots(tmp_path):
    folder = Path(os.environ.get("SWITCHYARD_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def wait_http(stack, url, what):
    def answers():
        try:
            with urllib.request.urlopen(url, timeout=2):
                return True
        except OSError as exc:
            return getattr(exc, "code", None) is not None  # an HTTP error is an answer

    stack.wait_for(answers, timeout=60, what=what)


def logged_in(browser, base, path, height=1000):
    """A page of ``browser``, 1400 px wide, logged in to the admin as the operator and at ``path``."""
    page = browser.new_page(viewport={"width": 1400, "height": height})
    page.goto(f"{base}/admin/login/?next={path}")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    return page


def fill(page, name):
    return page.eval_on_selector(f'g.sy-node[data-name="{name}"] rect', "rect => getComputedStyle(rect).fill")


def test_an_operator_starts_watches_and_cancels_a_workflow_in_the_admin(stack, browser, screenshots, tmp_path):
    web_port, flower_port = free_port(), free_port()
    base, flower = f"http://127.0.0.1:{web_port}", f"http://127.0.0.1:{flower_port}"
    stack.configure(FLOWER_URL=flower)
    get_user_model().objects.create_superuser("operator", "operator@localhost", PASSWORD)
    agent = stack.agent_name("local")
    stack.start_manager()
    stack.start_agent(agent, concurrency=2)
    stack.manage("web", "runserver", "--noreload", f"127.0.0.1:{web_port}")
    # Flower keeps its history under its var dir: one of its own, so it lists this test's tasks only.
    stack.manage("flower", "run_flower", "--address=127.0.0.1", f"--port={flower_port}",
                 env={"SWITCHYARD_VAR_DIR": str(tmp_path / "flower"),
                      "FLOWER_BASIC_AUTH": f"{FLOWER_USER}:{FLOWER_PASSWORD}"})
    stack.wait_for_agent(agent)
    wait_http(stack, f"{base}/admin/login/", "the web server")

    page = logged_in(browser, base, "/admin/workflows_app/execution/add/")

    # Start it from the admin: three members of 6 s on an agent of two processes, then a join.
    page.select_option("#id_workflow", "it_fan_in")
    page.fill("#id_parameters", json.dumps({"agent": agent, "join_agent": agent, "members": 3, "seconds": 6}))
    page.click("#sy-start input[type=submit]")
    expect(page.locator("ul.messagelist")).to_contain_text("it_fan_in: execution")
    execution = Execution.objects.get(workflow_id="it_fan_in")
    assert page.url.endswith(f"/admin/workflows_app/execution/{execution.pk}/change/")

    # The picture: one box per operation, labelled with its step and state, an arrow per dependency.
    nodes = page.locator("#sy-graph g.sy-node")
    expect(nodes).to_have_count(4, timeout=30_000)
    expect(page.locator("#sy-graph path.sy-edge")).to_have_count(3)
    expect(page.locator('g.sy-node[data-name="m0"]')).to_have_attribute("data-state", "started", timeout=30_000)
    assert fill(page, "m0") == STARTED_FILL
    page.screenshot(path=str(screenshots / "execution-running.png"), full_page=True)

    # It changes colour as it ends, without a reload by hand.
    expect(page.locator('g.sy-node[data-name="m0"]')).to_have_attribute("data-state", "succeeded", timeout=30_000)
    assert fill(page, "m0") == SUCCEEDED_FILL
    assert page.locator('g.sy-node[data-name="m0"] text.sy-node-state').text_content() == "succeeded"
    expect(page.locator('#sy-operations tr[data-step="m0"] .sy-badge')).to_have_text("succeeded")
    page.screenshot(path=str(screenshots / "execution.png"), full_page=True)

    page.click('button[data-action="cancel"]')
    expect(page.locator("ul.messagelist")).to_contain_text(f"execution {execution.pk} is now")
    expect(page.locator("#sy-status")).to_have_attribute("data-status", "cancelled", timeout=60_000)
    expect(page.locator('g.sy-node[data-name="join"]')).to_have_attribute("data-state", "cancelled", timeout=10_000)
    # The page followed the status in place: the operator's message is still there to read.
    expect(page.locator("ul.messagelist")).to_contain_text(f"execution {execution.pk} is now")
    page.screenshot(path=str(screenshots / "execution-cancelled.png"), full_page=True)
    execution.refresh_from_db()
    assert execution.status == "cancelled"

    # Flower names the steps: the workflow, the step and the operation.
    flower_page = browser.new_page(viewport={"width": 1400, "height": 700},
                                   http_credentials={"username": FLOWER_USER, "password": FLOWER_PASSWORD})
    wait_http(stack, f"{flower}/healthcheck", "Flower")

    def in_flower():
        flower_page.goto(f"{flower}/tasks")
        return flower_page.locator("table#tasks-table").get_by_text("it_fan_in › m0").count() > 0

    stack.wait_for(in_flower, timeout=60, what="the steps in Flower's task list")
    flower_page.screenshot(path=str(screenshots / "flower-tasks.png"))


def test_an_operator_goes_from_a_parent_to_its_child_and_back(stack, browser, screenshots):
    """A child execution's box in its parent's picture is outlined as a workflow and leads to
    the child's page, which names its parent and the step that follows it."""
    web_port = free_port()
    base = f"http://127.0.0.1:{web_port}"
    get_user_model().objects.create_superuser("operator", "operator@localhost", PASSWORD)
    agent = stack.agent_name("local")
    stack.start_manager()
    stack.start_agent(agent, concurrency=2)
    stack.manage("web", "runserver", "--noreload", f"127.0.0.1:{web_port}")
    stack.wait_for_agent(agent)
    wait_http(stack, f"{base}/admin/login/", "the web server")
    parent = services.start("it_parent", {"agent": agent, "other_agent": agent, "children": 2, "seconds": 4})
    stack.wait_for(lambda: Execution.objects.filter(parent_id=parent.pk).count() == 2, 30, "both children")
    child = Execution.objects.get(parent_id=parent.pk, parent_step="child0")

    page = logged_in(browser, base, f"/admin/workflows_app/execution/{parent.pk}/change/", height=900)
    box = page.locator('#sy-graph g.sy-node[data-name="child0"]')
    expect(box).to_have_attribute("data-kind", "workflow", timeout=30_000)
    expect(page.locator("#sy-children tr")).to_have_count(3)  # the header and the two children
    page.screenshot(path=str(screenshots / "parent.png"), full_page=True)

    box.click()
    page.wait_for_url(f"**/admin/workflows_app/execution/{child.pk}/change/")
    expect(page.locator("#sy-parent")).to_contain_text("child0")
    page.screenshot(path=str(screenshots / "child.png"), full_page=True)
    page.click("#sy-parent a")
    page.wait_for_url(f"**/admin/workflows_app/execution/{parent.pk}/change/")
    expect(page.locator("#sy-status")).to_have_attribute("data-status", "completed", timeout=60_000)
