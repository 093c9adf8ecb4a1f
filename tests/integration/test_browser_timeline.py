"""The execution page's timeline in a real browser (Playwright driving Debian's ``chromium``, as in
test_browser.py): a real execution with a retried step, a long one, a fan-out and a step that
waits for an agent nobody serves, followed live; then a fan-out of 1,000 attempts stored in the
database. Screenshots go where test_browser.py puts them (``SWITCHYARD_SCREENSHOTS``, or the
test's own directory): ``timeline.png``, ``timeline-1000.png``, ``timeline-1000-open.png``.
"""

import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings
from django.utils import timezone
from playwright.sync_api import expect

from tests.admin.test_timeline import fan_out
from tests.integration.harness import NO_DATABASE_URL, WORKFLOW_MODULES, free_port
from tests.integration.test_browser import PASSWORD, browser, logged_in, screenshots, wait_http  # noqa: F401  (fixtures)
from workflows_app import services
from workflows_app.models import Execution

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MODULES = [WORKFLOW_MODULES, "tests.timeline_workflows"]

#: A bar's class names, its seconds, and how far its right edge is from the "now" mark (px).
BAR = """bar => {
  const now = document.querySelector('#sy-timeline .sy-tl-now');
  const edge = bar.getBoundingClientRect().right;
  return {classes: bar.className, seconds: Number(bar.dataset.seconds),
          fromNow: now ? Math.abs(edge - now.getBoundingClientRect().left) : null};
}"""


@pytest.fixture
def modules():
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=MODULES):
        yield


def outcomes(page, step):
    return page.eval_on_selector_all(f'#sy-timeline .sy-tl-bar[data-step="{step}"]',
                                     "bars => bars.map(b => b.dataset.attempt + ':' + b.dataset.outcome)")


def test_the_timeline_of_an_execution_follows_its_attempts(stack, browser, screenshots, modules):  # noqa: F811
    web_port = free_port()
    base = f"http://127.0.0.1:{web_port}"
    env = {"SWITCHYARD_WORKFLOW_MODULES": ",".join(MODULES)}
    get_user_model().objects.create_superuser("operator", "operator@localhost", PASSWORD)
    agent = stack.agent_name("local")
    manager = stack.manage("manager", "run_manager", "--loglevel", "INFO", env=env)
    stack.manage(agent, "run_agent", agent, "--concurrency", "2", "--loglevel", "INFO",
                 env={**env, "DATABASE_URL": NO_DATABASE_URL})
    stack.manage("web", "runserver", "--noreload", f"127.0.0.1:{web_port}", env=env)
    stack.wait_for_agent(agent)
    wait_http(stack, f"{base}/admin/login/", "the web server")
    execution = services.start("it_timeline", {"agent": agent, "absent_agent": stack.agent_name("absent")})

    page = logged_in(browser, base, f"/admin/workflows_app/execution/{execution.pk}/change/", height=1100)
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    box = page.locator("#sy-timeline")

    # The long step runs: its bar reaches "now", and grows at each refresh.
    long_bar = box.locator('.sy-tl-bar[data-step="long"]')
    expect(long_bar).to_have_class("sy-tl-bar sy-tl-running", timeout=30_000)
    before = long_bar.evaluate(BAR)
    refreshes = int(box.get_attribute("data-refreshes"))
    expect(box).not_to_have_attribute("data-refreshes", str(refreshes), timeout=10_000)
    after = long_bar.evaluate(BAR)
    assert after["seconds"] > before["seconds"] and after["classes"] == "sy-tl-bar sy-tl-running"
    assert before["fromNow"] < 3 and after["fromNow"] < 3, (before, after)

    # The flaky step: two attempts rescheduled (to be retried), the third succeeded, on one row.
    expect(box.locator('.sy-tl-bar[data-step="flaky"]')).to_have_count(3, timeout=30_000)
    expect(box.locator('.sy-tl-bar[data-step="flaky"].sy-tl-succeeded')).to_have_count(1, timeout=10_000)
    assert outcomes(page, "flaky") == ["1:rescheduled", "2:rescheduled", "3:succeeded"]
    assert "WorkerLost" not in box.locator('.sy-tl-bar[data-step="flaky"]').first.get_attribute("title")
    assert "RecoverableError" in box.locator('.sy-tl-bar[data-step="flaky"]').first.get_attribute("title")
    # The fan-out: one row, its ten attempts in lanes, opened on a click to a row per member.
    group = box.locator('.sy-tl-group[data-group="part-0"]')
    expect(group.locator(".sy-tl-bar.sy-tl-succeeded")).to_have_count(10, timeout=30_000)
    group.locator("button.sy-tl-label").click()
    expect(box.locator(".sy-tl-member")).to_have_count(10)
    expect(box.locator(".sy-tl-member .sy-tl-bar.sy-tl-succeeded")).to_have_count(10)
    # The step sent to an agent nobody serves waits to start; "ship" is not sent yet.
    expect(box.locator('.sy-tl-bar[data-step="stuck"]')).to_have_class("sy-tl-bar sy-tl-waiting")
    expect(box.locator('.sy-tl-row[data-step="ship"] .sy-tl-none')).to_have_text("not sent yet")
    expect(long_bar).to_have_class("sy-tl-bar sy-tl-running")
    rows = box.locator(".sy-tl-chart > .sy-tl-row:not(.sy-tl-axis)")
    # In the order they were first sent, the fan-out's members under it: "ship", never sent, last.
    order = rows.evaluate_all("rows => rows.map(r => r.dataset.step || 'group ' + r.dataset.group)")
    opened = order.index("group part-0")
    assert order[opened + 1:opened + 11] == [f"part-{i}" for i in range(10)]
    assert order[0] == "fetch" and order[-1] == "ship" and sorted(order[1:-1]) == sorted(
        ["flaky", "long", "stuck", "group part-0"] + [f"part-{i}" for i in range(10)])
    box.screenshot(path=str(screenshots / "timeline.png"))

    # Ended: the long step succeeded; the execution stopped, the waiting attempt is cancelled and
    # the timeline, drawn to the execution's end, stops refreshing.
    expect(long_bar).to_have_class("sy-tl-bar sy-tl-succeeded", timeout=30_000)
    services.ACTIONS["force-cancel"](execution.pk)
    stack.wait_for_terminal(execution.pk)
    expect(box.locator('.sy-tl-bar[data-step="stuck"]')).to_have_class("sy-tl-bar sy-tl-cancelled", timeout=10_000)
    expect(box).to_have_attribute("data-active", "false")
    expect(box.locator(".sy-tl-end")).to_have_count(1)
    assert Execution.objects.get(pk=execution.pk).status == "cancelled"

    # 1,000 attempts (stored, not run: the manager is stopped first so that nothing acts on them):
    # one row of a lane per agent process and one for the queue, opened into pages of 50 rows.
    stack.stop(manager)
    thousand = fan_out(1000, now=timezone.now(), retry_every=100, fail_every=250)
    page.goto(f"{base}/admin/workflows_app/execution/{thousand.pk}/change/#timeline")
    group = box.locator('.sy-tl-group[data-group="item-0"]')
    expect(group).to_have_attribute("data-lanes", "9", timeout=30_000)
    assert int(group.get_attribute("data-attempts")) > 1000
    expect(box.locator(".sy-tl-row.sy-tl-step")).to_have_count(2)  # prepare, report
    box.screenshot(path=str(screenshots / "timeline-1000.png"))
    group.locator("button.sy-tl-label").click()
    expect(box.locator(".sy-tl-chart > .sy-tl-row:not(.sy-tl-axis)")).to_have_count(50)
    expect(box.locator(".sy-tl-more")).to_contain_text("showing 50 of 1003 rows")
    box.locator(".sy-tl-show-more").click()
    expect(box.locator(".sy-tl-chart > .sy-tl-row:not(.sy-tl-axis)")).to_have_count(100)
    box.screenshot(path=str(screenshots / "timeline-1000-open.png"))
    assert errors == []
