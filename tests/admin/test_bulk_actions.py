"""The list's actions on many executions: Django's "select all N matching" (``select_across``)
with every action, each execution through its service (``workflows_app.bulk``) a batch at a
time, and one message in counts instead of one per execution; the force actions' confirmation
page asks again for all those matching, not for the rows of the page. Up to
``MESSAGES_PER_EXECUTION`` rows checked, each still gets its message (tests/admin/test_admin.py)."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.urls import reverse

from workflows_app.admin.executions import MESSAGES_PER_EXECUTION
from workflows_app.bulk import run
from workflows_app.models import Execution
from workflows_app.states import ExecutionStatus

pytestmark = pytest.mark.django_db

LIST = reverse("admin:workflows_app_execution_changelist")


def messages_of(response):
    return [str(message) for message in response.context["messages"]] if response.context else []


@pytest.fixture
def forcer(client):
    """A staff user who may see and act on executions, force ones included."""
    user = get_user_model().objects.create_user("forcer", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="workflows_app",
        codename__in=["view_execution", "add_execution", "change_execution", "force_execution"]))
    client.force_login(user)
    return client


@pytest.fixture
def many(make_execution):
    """60 started executions of ``install`` (more than a page of the list: 50), 2 completed ones, and
    a started one of ``demo``."""
    Execution.objects.bulk_create(Execution(workflow_id="install", status=ExecutionStatus.STARTED) for _ in range(60))
    make_execution(status=ExecutionStatus.COMPLETED, workflow_id="install")
    make_execution(status=ExecutionStatus.COMPLETED, workflow_id="install")
    return make_execution(status=ExecutionStatus.STARTED, workflow_id="demo")


def counts(workflow_id="install") -> dict:
    rows = Execution.objects.filter(workflow_id=workflow_id).values_list("status", flat=True)
    return {status: list(rows).count(status) for status in set(rows)}


def page_ids(client, query) -> list:
    page = client.get(LIST + query).content.decode()
    return re.findall(r'name="_selected_action" value="([0-9a-f-]{36})"', page)


def test_select_all_matching_cancels_every_one_the_filters_match_in_batches_with_one_message(
        forcer, many, monkeypatch, outbox):
    monkeypatch.setattr(run, "BATCH_SIZE", 7)  # far fewer than the 62 matching
    query = "?workflow_id=install"
    on_page = page_ids(forcer, query)
    assert len(on_page) == 50, "the list shows a page"
    response = forcer.post(LIST + query, {"action": "cancel_selected", "select_across": "1", "index": "0",
                                          "_selected_action": on_page}, follow=True)
    assert counts() == {"cancelled": 60, "completed": 2}, "every one matching, those past the page too"
    assert Execution.objects.get(pk=many.pk).status == ExecutionStatus.STARTED, "not matching: left alone"
    assert messages_of(response) == ["cancel: 60 done, 2 skipped (completed 2), 0 refused, of 62 matching"]


def test_more_rows_checked_than_messages_per_execution_are_said_in_counts(forcer, many, outbox):
    chosen = list(Execution.objects.filter(workflow_id="install", status=ExecutionStatus.STARTED)
                  .values_list("pk", flat=True)[:MESSAGES_PER_EXECUTION + 1])
    response = forcer.post(LIST, {"action": "resume_selected", "index": "0", "_selected_action": chosen}, follow=True)
    assert messages_of(response) == [f"resume: {len(chosen)} done, 0 skipped, 0 refused, of {len(chosen)} matching"]
    few = chosen[:2]
    response = forcer.post(LIST, {"action": "cancel_selected", "index": "0", "_selected_action": few}, follow=True)
    assert sorted(messages_of(response)) == sorted(f"cancel: execution {pk} is now cancelled" for pk in few)


def test_a_force_action_on_all_matching_confirms_them_all_then_takes_it_on_them_all(forcer, many, outbox):
    query = "?workflow_id=install"
    on_page = page_ids(forcer, query)
    confirm = forcer.post(LIST + query, {"action": "kill_selected", "select_across": "1", "index": "0",
                                         "_selected_action": on_page})
    page = confirm.content.decode()
    assert confirm.status_code == 200 and "Are you sure you want to kill\n62 executions (all those the list matches)?" in page
    assert 'name="select_across" value="1"' in page
    assert page.count("<li>install <code>") == 62, "those past the page are named too (up to 100)"
    assert page.count('name="_selected_action"') == 50, "the page's rows, which Django's list wants back"
    assert counts() == {"started": 60, "completed": 2}, "nothing before the confirmation"

    # The confirmation posts back to the list's own URL (its filters in the query), as the form does.
    fields = dict(re.findall(r'<input type="hidden" name="(select_across|action|confirmed)" value="([^"]*)"', page))
    response = forcer.post(LIST + query, {**fields, "_selected_action": on_page}, follow=True)
    assert counts() == {"cancelled": 60, "completed": 2}
    assert Execution.objects.get(pk=many.pk).status == ExecutionStatus.STARTED
    assert messages_of(response) == ["kill: 60 done, 2 skipped (completed 2), 0 refused, of 62 matching"]


def test_the_force_confirmation_of_rows_checked_still_names_them(forcer, many):
    chosen = [str(pk) for pk in Execution.objects.filter(workflow_id="install").values_list("pk", flat=True)[:3]]
    page = forcer.post(LIST, {"action": "force_cancel_selected", "index": "0", "_selected_action": chosen}).content.decode()
    assert "force-cancel\n3 executions?" in page and 'name="select_across"' not in page
    assert sorted(re.findall(r'name="_selected_action" value="([0-9a-f-]{36})"', page)) == sorted(chosen)


def test_an_action_the_user_may_take_on_no_execution_is_refused_in_one_message(client, many, outbox):
    """An operator without force_execution is not offered kill; posted anyway, Django refuses it."""
    user = get_user_model().objects.create_user("op", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="workflows_app", codename__in=["view_execution", "change_execution"]))
    client.force_login(user)
    response = client.post(LIST, {"action": "kill_selected", "select_across": "1", "index": "0",
                                  "_selected_action": [str(many.pk)], "confirmed": "yes"}, follow=True)
    assert messages_of(response) == ["No action selected."]
    assert counts() == {"started": 60, "completed": 2}
