"""Switchyard's own admin pages look like the admin around them, on every Django in range (the
newest lane runs this file too): a real browser (Playwright driving Debian's ``chromium``; the
fixtures are test_browser.py's) against Django's live test server. Each page's breadcrumbs are
the admin's own bar — Django 6.1 styles another markup than 5.2 — and the start page's form reads
as the admin's forms do: one case for its labels, each field under the last. Screenshots go under
the test's output directory (``SWITCHYARD_SCREENSHOTS`` when set)."""

import django
import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from tests.integration.test_browser import browser, screenshots  # noqa: F401 (fixtures)
from workflows_app.models import Execution, Schedule
from workflows_app.states import ExecutionStatus

pytestmark = [pytest.mark.integration]

#: The admin's breadcrumbs bar (--breadcrumbs-bg) and its links (--breadcrumbs-link-fg).
BAR = "rgb(38, 75, 93)"
LINK = "rgb(255, 255, 255)"


@pytest.fixture
def admin_page(browser, live_server, client, transactional_db):  # noqa: F811 (fixture)
    """``open(path)``: a page of ``browser``, 1400 px wide, logged in as a superuser, at ``path``."""
    get_user_model().objects.create_superuser("admin", password="pw")
    client.login(username="admin", password="pw")
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}])

    def open(path):
        page = context.new_page()
        page.goto(live_server.url + path)
        return page

    yield open
    context.close()


def pages():
    execution = Execution.objects.create(workflow_id="demo", status=ExecutionStatus.STARTED, started_at=timezone.now())
    schedule = Schedule.objects.create(workflow_id="demo", interval=3600, next_run_at=timezone.now())
    return {
        "start": reverse("admin:workflows_app_execution_add"),
        "start-demo": reverse("admin:workflows_app_execution_add") + "?workflow=demo",
        "execution": reverse("admin:workflows_app_execution_change", args=[execution.pk]),
        "schedule": reverse("admin:workflows_app_schedule_change", args=[schedule.pk]),
    }


def test_every_page_of_switchyards_has_the_admins_breadcrumbs(admin_page, screenshots):  # noqa: F811
    for name, path in pages().items():
        page = admin_page(path)
        page.screenshot(path=str(screenshots / f"{name}-django-{django.__version__}.png"))
        check(page, name)
        if name == "execution":  # its Kill asks for a confirmation, on a page of its own
            page.click("button.sy-action-kill")
            page.wait_for_selector("text=Are you sure")
            page.screenshot(path=str(screenshots / f"confirm-django-{django.__version__}.png"))
            check(page, "confirm")
        page.close()


def check(page, name):
    crumbs = page.locator(".breadcrumbs")
    assert crumbs.count() == 1, name
    assert crumbs.evaluate("e => getComputedStyle(e).backgroundColor") == BAR, name
    home = crumbs.get_by_role("link", name="Home")
    assert home.evaluate("e => getComputedStyle(e).color") == LINK, name



#: What the start page's form reads (its labels, in the admin's one case: a capital, then lower case).
LABELS = ["Workflow:", "Parameters:", "Deployment:", "If the deployment is busy:", "Failure mode:", "Dry run"]
FORM = """() => [...document.querySelectorAll("#sy-start .form-row")].map(row => {
  const label = row.querySelector("label"), field = row.querySelector("input, select, textarea");
  const help = row.querySelector(".help");
  const left = e => Math.round(e.getBoundingClientRect().left - row.getBoundingClientRect().left);
  const top = e => Math.round(e.getBoundingClientRect().top - row.getBoundingClientRect().top);
  return {label: label.textContent.trim(), checkbox: field.type === "checkbox",
          field: left(field), labelToField: [left(field) - left(label), top(field) > top(label) + 10]};
})"""
#: The same, of the admin's own form: a schedule's page, its field ``cron``.
ADMINS = """() => {
  const row = document.querySelector(".form-row.field-cron"), label = row.querySelector("label");
  const field = row.querySelector("input");
  const left = e => Math.round(e.getBoundingClientRect().left - row.getBoundingClientRect().left);
  const top = e => Math.round(e.getBoundingClientRect().top - row.getBoundingClientRect().top);
  return {field: left(field), labelToField: [left(field) - left(label), top(field) > top(label) + 10]};
}"""


def test_the_start_pages_form_reads_as_the_admins_forms_do(admin_page, screenshots):  # noqa: F811
    """Its labels in one case, and each field placed from its label as the admin's own forms place
    theirs on this Django (beside it on 5.2, under it on 6.1); a checkbox before its label."""
    schedule = Schedule.objects.create(workflow_id="demo", interval=3600, next_run_at=timezone.now())
    admins = admin_page(reverse("admin:workflows_app_schedule_change", args=[schedule.pk])).evaluate(ADMINS)
    page = admin_page(reverse("admin:workflows_app_execution_add"))
    rows = page.evaluate(FORM)
    page.screenshot(path=str(screenshots / f"start-form-django-{django.__version__}.png"))
    assert [row["label"] for row in rows] == LABELS
    fields = [row for row in rows if not row["checkbox"]]
    assert all(row["field"] == admins["field"] and row["labelToField"] == admins["labelToField"] for row in fields), \
        (admins, rows)
