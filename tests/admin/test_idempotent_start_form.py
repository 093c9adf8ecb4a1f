"""The admin's start form starts once however often its page is submitted: each page carries an
idempotency key of its own (a hidden field, new each time the form is shown), so a reload of the
answer or a second click answers the execution the first submission started."""

import re
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.urls import reverse

from workflows_app.models import Execution

pytestmark = pytest.mark.django_db

START = reverse("admin:workflows_app_execution_add")


@pytest.fixture
def operator(client):
    user = get_user_model().objects.create_user("operator", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="workflows_app", codename__in=["view_execution", "add_execution"]))
    client.force_login(user)
    return client


def key_of(page) -> str:
    """The idempotency key the page's form carries."""
    found = re.search(r'<input type="hidden" name="idempotency_key" value="([^"]*)"', page)
    assert found, "the form carries an idempotency key"
    return found.group(1)


def page_url(pk):
    return reverse("admin:workflows_app_execution_change", args=[pk])


def messages_of(response):
    return [str(message) for message in response.context["messages"]]


def submit(client, key, parameters='{"n": 2}', url=START):
    return client.post(url, {"workflow": "demo", "parameters": parameters, "deployment_id": "", "if_busy": "refuse",
                             "failure_mode": "", "idempotency_key": key}, follow=True)


def test_each_form_shown_carries_a_new_key(operator):
    first, second = key_of(operator.get(START).content.decode()), key_of(operator.get(START).content.decode())
    assert uuid.UUID(first) and uuid.UUID(second) and first != second
    assert uuid.UUID(key_of(operator.get(f"{START}?workflow=demo").content.decode())), "the one workflow's form too"


def test_the_same_page_submitted_twice_starts_once_and_shows_the_first_execution(operator):
    key = key_of(operator.get(START).content.decode())
    first = submit(operator, key)
    execution = Execution.objects.get()
    assert first.redirect_chain[-1][0] == page_url(execution.pk)
    again = submit(operator, key)  # a reload of the answer, a second click
    assert Execution.objects.count() == 1
    assert again.redirect_chain[-1][0] == page_url(execution.pk)
    assert messages_of(again) == [f"this form was already submitted: it started execution {execution.pk}, which is "
                                  "pending; nothing was started again"]


def test_two_pages_start_two_executions(operator):
    submit(operator, key_of(operator.get(START).content.decode()))
    submit(operator, key_of(operator.get(START).content.decode()))
    assert Execution.objects.count() == 2


def test_the_page_submitted_again_with_other_values_says_so_and_then_starts_another(operator):
    key = key_of(operator.get(START).content.decode())
    submit(operator, key)
    first = Execution.objects.get()
    changed = submit(operator, key, parameters='{"n": 5}')  # back in the browser, a value changed
    assert changed.status_code == 200 and not changed.redirect_chain, "the form again"
    page = changed.content.decode()
    assert f"This page was submitted before with other values and started execution {first.pk}" in page
    assert Execution.objects.count() == 1
    renewed = key_of(page)
    assert renewed != key, "a new key: submitted, the page starts another execution"
    started = submit(operator, renewed, parameters='{"n": 5}')
    second = Execution.objects.exclude(pk=first.pk).get()
    assert second.parameters == {"n": 5} and started.redirect_chain[-1][0] == page_url(second.pk)


def test_a_refused_submission_keeps_its_key_and_starts_once_put_right(operator):
    key = key_of(operator.get(START).content.decode())
    refused = submit(operator, key, parameters='{"colour": "red"}')
    assert "unknown parameter(s): colour" in refused.content.decode()
    assert key_of(refused.content.decode()) == key
    submit(operator, key)
    submit(operator, key)
    assert Execution.objects.count() == 1


def test_a_form_without_a_key_starts_each_time(operator):
    for _ in range(2):
        operator.post(START, {"workflow": "demo", "parameters": "{}", "if_busy": "refuse", "failure_mode": ""})
    assert Execution.objects.count() == 2
