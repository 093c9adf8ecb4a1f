"""The admin's "Run again from step": a form on an execution's page, for those who may start its
workflow; the original and its reruns link to each other."""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.urls import reverse

from workflows_app.models import Execution


@pytest.fixture(autouse=True)
def with_the_rerun_workflows(settings):
    settings.SWITCHYARD_WORKFLOW_MODULES = ["tests.rerun_workflows"]


def login(client, username, codenames):
    user = get_user_model().objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="workflows_app", codename__in=codenames))
    client.force_login(user)
    return client


def page(execution_id):
    return reverse("admin:workflows_app_execution_change", args=[execution_id])


def rerun_url(execution_id):
    return reverse("admin:workflows_app_execution_rerun", args=[execution_id])


def test_the_button_reruns_from_the_step_and_the_pages_link_the_two(client, switchyard,
                                                                     django_capture_on_commit_callbacks):
    first = switchyard.run("rr_canvas", {"second": 10})
    login(client, "operator", ["view_execution", "add_execution"])
    html = client.get(page(first.id)).content.decode()
    assert 'id="sy-rerun"' in html and '<option value="1:rr_add">' in html

    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(rerun_url(first.id), {"from_step": "1:rr_add"})
    rerun = Execution.objects.get(rerun_of=first.id)
    assert response.status_code == 302 and response["Location"] == page(rerun.pk)
    done = switchyard.finish(type(first)(rerun.pk))
    assert done.status == "completed" and done.operations["0:rr_add"].attempt == 0
    assert done.execution.parameters == {"second": 10}

    new_page = client.get(page(rerun.pk)).content.decode()
    assert f'id="sy-rerun-of"><a href="{page(first.id)}">' in new_page and "<code>1:rr_add</code>" in new_page
    original = client.get(page(first.id)).content.decode()
    assert 'id="sy-reruns"' in original and f'href="{page(rerun.pk)}"' in original


def test_a_step_the_execution_does_not_have_is_a_message_and_nothing_starts(client, switchyard):
    first = switchyard.run("rr_canvas")
    login(client, "operator", ["view_execution", "add_execution"])
    response = client.post(rerun_url(first.id), {"from_step": "nope"}, follow=True)
    assert response.status_code == 200
    assert "has no step &#x27;nope&#x27;" in response.content.decode()
    assert Execution.objects.count() == 1


def test_who_may_only_view_sees_no_button_and_is_refused(client, switchyard):
    first = switchyard.run("rr_canvas")
    login(client, "viewer", ["view_execution"])
    assert 'id="sy-rerun"' not in client.get(page(first.id)).content.decode()
    response = client.post(rerun_url(first.id), {"from_step": "0:rr_add"}, follow=True)
    assert response.status_code == 200 and "may not start" in response.content.decode()
    assert Execution.objects.count() == 1


def test_a_get_is_not_allowed(client, switchyard):
    first = switchyard.run("rr_canvas")
    login(client, "operator", ["view_execution", "add_execution"])
    assert client.get(rerun_url(first.id)).status_code == 405


@pytest.mark.parametrize("step", ["a\x00b", "x" * 300_000])
def test_a_step_name_that_cannot_be_is_a_short_message(client, switchyard, step):
    first = switchyard.run("rr_canvas")
    login(client, "operator", ["view_execution", "add_execution"])
    response = client.post(rerun_url(first.id), {"from_step": step}, follow=True)
    assert response.status_code == 200 and "has no step" in response.content.decode()
    assert len(response.content) < 200_000
    assert Execution.objects.count() == 1
