"""An execution's page as an operator watches it, in a real browser (Playwright driving Debian's
``chromium``; the fixtures are test_browser.py's) against a real web server, manager and agent.

One stack for all the checks. The page follows its execution: at every look its counts, rows,
status and messages agree with each other, and it ends showing what the database holds, without
a reload. A step sent to an agent nobody runs is a warning on the page. The admin's small
things: dates to the second in the lists, columns and badges that fit at 1400 px, durations under
a second, the message a cancel leaves, a red confirmation for Kill, a handled failure that does
not look like one. Screenshots go under the test's output directory (``SWITCHYARD_SCREENSHOTS``
when set).
"""

import json
import re

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from tests.integration.harness import free_port
from tests.integration.test_browser import PASSWORD, browser, logged_in, screenshots, wait_http  # noqa: F401 (fixtures)
from workflows_app import services
from workflows_app.models import Execution, Operation

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: admin.css's red of Kill, Force-cancel and Force-resume.
KILL_RED = "rgb(168, 7, 26)"
MOMENT = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")

#: One look at the page, read in one go: what live.js replaces at once is seen at once.
LOOK = """() => {
  const text = el => el ? el.textContent.replace(/\\s+/g, " ").trim() : null;
  return {
    status: document.getElementById("sy-status").dataset.status,
    filter: text(document.querySelector(".sy-filter")),
    rows: [...document.querySelectorAll("#sy-operations tbody tr[data-step]")].map(
      tr => [tr.dataset.step, text(tr.querySelector(".sy-op-state"))]),
    messages: [...document.querySelectorAll("ul.messagelist li")].map(text),
    events: [...document.querySelectorAll("#sy-events tbody tr")].map(tr => text(tr.children[2])),
    ended: text(document.querySelector("#sy-summary tr:nth-child(5) td")),
    warnings: [...document.querySelectorAll("#sy-warnings li")].map(text),
    refreshes: Number(document.body.dataset.syRefreshes || 0),
    reloaded: !window.syNotReloaded,
  };
}"""

#: Where the operations' table is on screen (its top, from the window's top).
ROWS_ON_SCREEN = "document.getElementById('sy-operations').getBoundingClientRect().top"


def counts_of(filter_text):
    """``all 4 · started 2 · pending 2`` -> {"all": 4, "started": 2, "pending": 2}."""
    return {name: int(count) for name, count in re.findall(r"([a-z_]+) (\d+)", filter_text)}


def assert_consistent(look):
    """What one look shows agrees with itself: the counts are the rows' (all on one page), and a
    message never names a status the page no longer shows as the present one."""
    counts = counts_of(look["filter"])
    states = [state for _, state in look["rows"]]
    assert counts.pop("all") == len(states), look
    assert {state: n for state, n in counts.items() if n} == {s: states.count(s) for s in set(states)}, look
    for message in look["messages"]:
        said = re.search(r" is (?:now )?([a-z_]+)(?: \(was [a-z_]+\))?$", message)
        if said and "execution" in message:
            assert said.group(1) == look["status"], look


def outside(page, selector, container="#changelist-form"):
    """The elements of ``selector`` whose box is not within the viewport and ``container`` (which
    scrolls what overflows it): what the operator cannot read without scrolling sideways."""
    return page.evaluate("""([selector, container]) => {
      const box = document.querySelector(container).getBoundingClientRect();
      const right = Math.min(box.right, window.innerWidth);
      return [...document.querySelectorAll(selector)].filter(el => {
        const r = el.getBoundingClientRect();
        return r.left < box.left - 0.5 || r.right > right + 0.5 || el.scrollWidth > el.clientWidth + 1;
      }).map(el => el.outerHTML.slice(0, 120));
    }""", [selector, container])


def test_an_execution_page_follows_its_execution_and_the_admin_reads_well(stack, browser, screenshots):  # noqa: F811
    web_port = free_port()
    base = f"http://127.0.0.1:{web_port}"
    get_user_model().objects.create_superuser("operator", "operator@localhost", PASSWORD)
    agent = stack.agent_name("local")
    stack.start_manager()
    stack.start_agent(agent, concurrency=2)
    stack.manage("web", "runserver", "--noreload", f"127.0.0.1:{web_port}")
    stack.wait_for_agent(agent)
    wait_http(stack, f"{base}/admin/login/", "the web server")

    page = logged_in(browser, base, "/admin/workflows_app/execution/add/")

    # --- watched from start to end: three members of 2 s on two processes, then a join ---------
    page.select_option("#id_workflow", "it_fan_in")
    page.fill("#id_parameters", json.dumps({"agent": agent, "join_agent": agent, "members": 3, "seconds": 2}))
    page.click("#sy-start input[type=submit]")
    expect(page.locator("ul.messagelist")).to_contain_text("it_fan_in: execution")
    # The page's scripts (deferred) run once it is parsed: looked at before, the start's message
    # still says the status the start saw, beside the one the page was rendered with (CI, side by side).
    page.wait_for_load_state("domcontentloaded")
    execution = Execution.objects.get(workflow_id="it_fan_in")
    page.evaluate("window.syNotReloaded = true")
    looks = []
    for _ in range(200):
        look = page.evaluate(LOOK)
        assert not look["reloaded"], "the page was reloaded"
        assert_consistent(look)
        looks.append(look)
        if look["status"] == "completed":
            break
        if any(state == "started" for _, state in look["rows"]) and not any(
                "started" in seen["filter"] for seen in looks[:-1]):
            page.screenshot(path=str(screenshots / "page-running.png"), full_page=True)
        page.wait_for_timeout(250)
    execution.refresh_from_db()
    assert execution.status == "completed", [look["status"] for look in looks]
    assert any("started" in look["filter"] for look in looks), "the rows followed the operations while they ran"
    # The last look, a refresh after the end: what the database holds.
    assert looks[-1]["rows"] == [[name, "succeeded"] for name in ("m0", "m1", "m2", "join")], looks[-1]
    assert counts_of(looks[-1]["filter"]) == {"all": 4, "succeeded": 4}
    assert looks[-1]["messages"] == [f"Started it_fan_in: execution {execution.pk} is now completed (was pending)"]
    assert "workflow_completed" in looks[-1]["events"] and MOMENT.match(looks[-1]["ended"]), looks[-1]
    refreshes = looks[-1]["refreshes"]
    page.wait_for_timeout(2500)
    assert page.evaluate(LOOK)["refreshes"] == refreshes, "no refresh once the execution has ended"
    page.screenshot(path=str(screenshots / "page-completed.png"), full_page=True)

    # --- a step sent to an agent nobody runs: a warning, live; the filter and the rows stay -----
    waiting = services.start("it_fan_in", {"agent": agent, "join_agent": "nowhere", "members": 4, "seconds": 6})  # m3 sleeps: m0-m2 ran above
    stack.wait_for(lambda: Operation.objects.filter(execution=waiting, name="join").exists(), 60, "the steps to be stored")
    page.set_viewport_size({"width": 1400, "height": 600})  # a page taller than the window
    page.goto(f"{base}/admin/workflows_app/execution/{waiting.pk}/change/?state=pending")
    page.evaluate("window.syNotReloaded = true")
    expect(page.locator('#sy-operations tr[data-step="join"]')).to_have_count(1)
    # The graph is laid out after the page loads and grows the page above the operations: scrolled
    # before it, the browser moves the scroll to keep the rows in view (CI, side by side).
    expect(page.locator("#sy-graph svg")).to_have_count(1)
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    assert page.evaluate("window.scrollY") > 200
    rows_at = page.evaluate(ROWS_ON_SCREEN)
    warning = page.locator("#sy-warnings li")
    expect(warning).to_have_text("step 'join' waits for agent 'nowhere', which has never been seen", timeout=30_000)
    look = page.evaluate(LOOK)
    assert not look["reloaded"] and page.url.endswith("?state=pending")
    assert "pending 0" in look["filter"] and look["rows"] == [], "the filter stays, its rows follow"
    # The warning appeared above the rows: they stay where the operator had them on screen.
    assert abs(page.evaluate(ROWS_ON_SCREEN) - rows_at) <= 5, "the refreshes keep the rows in place"
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(screenshots / "page-warning.png"), full_page=True)

    # Kill asks first, with a button as red as the one that led there.
    assert page.eval_on_selector('button[data-action="kill"]', "b => getComputedStyle(b).backgroundColor") == KILL_RED
    page.click('button[data-action="kill"]')
    confirm = page.locator("input.sy-confirm")
    expect(confirm).to_have_value("Yes, kill")
    assert confirm.evaluate("b => getComputedStyle(b).backgroundColor") == KILL_RED
    page.screenshot(path=str(screenshots / "kill-confirmation.png"))
    page.click("a.cancel-link")

    # Cancel: one sentence, and the cancelled step's error reads once.
    page.click('button[data-action="cancel"]')
    expect(page.locator("#sy-status")).to_have_attribute("data-status", "cancelled", timeout=30_000)
    expect(page.locator("ul.messagelist li")).to_have_text(re.compile(
        rf"^Cancel: execution {waiting.pk} is now cancelled( \(was cancelling\))?$"), timeout=10_000)
    page.screenshot(path=str(screenshots / "cancel-message.png"))
    page.goto(f"{base}/admin/workflows_app/execution/{waiting.pk}/change/")
    assert page.locator("#sy-warnings li").count() == 0, "nothing waits any more"
    error = page.locator('#sy-operations tr[data-step="join"] .sy-error-cell').text_content()
    assert error == "Cancelled: the execution is cancelling", error
    page.screenshot(path=str(screenshots / "page-cancelled.png"), full_page=True)

    # --- a failure the workflow handled, durations under a second ---------------------------------
    saga = services.start("it_saga", {"agent": agent, "style": "graph", "pack_seconds": 0.3})
    stack.wait_for_terminal(saga.pk, timeout=60)
    saga.refresh_from_db()
    assert saga.status == "completed" and Operation.objects.filter(execution=saga, name="charge", state="failed").exists()
    page.goto(f"{base}/admin/workflows_app/execution/{saga.pk}/change/")
    durations = page.locator("#sy-operations tbody tr td:nth-child(8)").all_text_contents()
    assert "0s" not in durations and any(re.match(r"^0\.\d\ds$", d) for d in durations), durations

    # --- the lists at 1400 px --------------------------------------------------------------------
    page.goto(f"{base}/admin/workflows_app/execution/")
    handled = page.locator(f'#result_list tr:has(a:text-is("{str(saga.pk)[:8]}")) .sy-count.sy-handled')
    expect(handled).to_have_text("1 failed (handled)")
    assert handled.get_attribute("title") == "failed, and handled by the workflow"
    assert page.locator("#result_list .sy-count.sy-failed:not(.sy-handled)").count() == 0
    assert outside(page, "#result_list .sy-badge, #result_list .sy-count") == []
    created = page.locator("#result_list td.field-created").all_text_contents()
    assert len(created) == 3 and all(MOMENT.match(text) for text in created), created
    page.screenshot(path=str(screenshots / "executions-list.png"))

    page.goto(f"{base}/admin/workflows_app/event/")
    assert outside(page, "#result_list th.column-type, #result_list th.column-message, "
                         "#result_list td.field-type, #result_list td.field-message") == []
    times = page.locator("#result_list td.field-time").all_text_contents()
    assert times and all(MOMENT.match(text) for text in times), times
    page.screenshot(path=str(screenshots / "events-list.png"))

    for url, column in [("/admin/workflows_app/operation/", "started"), ("/admin/agents/agent/", "started")]:
        page.goto(base + url)
        texts = page.locator(f"#result_list td.field-{column}").all_text_contents()
        assert texts and all(MOMENT.match(text) for text in texts if text != "—"), (url, texts)
        assert any(MOMENT.match(text) for text in texts), (url, texts)

    # --- the project's root and the API's page ----------------------------------------------------
    page.goto(base + "/")
    assert page.url == f"{base}/admin/", "the root leads to the admin, not to a debug 404"
    page.goto(f"{base}/api/v1/docs")
    expect(page.locator("h1")).to_have_text("Switchyard API")
    expect(page.locator("body")).to_contain_text("Version 1 of the API, served under /api/v1/")
    # An enum's choices (drf-spectacular writes them as a markdown list) read as a list.
    assert page.locator("li", has_text="pending - Pending").count() > 0
    assert "* `" not in page.inner_text("body")
    page.screenshot(path=str(screenshots / "api-docs.png"))
