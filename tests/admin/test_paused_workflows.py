"""The admin's "Paused workflows": adding one pauses a workflow, the list's action unpauses it,
both through the services and their permission rule."""

import pytest
from django.contrib.auth import get_user_model

from tests.admin.test_admin_permissions import PERMISSIONS
from tests.api.conftest import make_user
from workflows_app.models import PausedWorkflow

pytestmark = pytest.mark.django_db

LIST = "/admin/workflows_app/pausedworkflow/"


def logged_in(client, kind):
    if kind == "superuser":
        user = get_user_model().objects.create_superuser("super", "super@localhost", "pw")
    else:
        user = make_user(kind, PERMISSIONS[kind], is_staff=True)
    client.force_login(user)
    return client


def test_an_operator_pauses_a_workflow_from_the_admin_and_unpauses_it(client):
    operator = logged_in(client, "operator")
    response = operator.post(LIST + "add/", {"workflow_id": "demo"}, follow=True)
    assert response.status_code == 200
    paused = PausedWorkflow.objects.get(workflow_id="demo")
    assert paused.paused_by == "operator"
    assert b"demo" in operator.get(LIST).content
    response = operator.post(LIST, {"action": "unpause_selected", "_selected_action": ["demo"], "index": "0"}, follow=True)
    assert "emo unpaused: 0 queued execution(s) started" in response.content.decode()  # Django capitalizes it
    assert not PausedWorkflow.objects.exists()


def test_a_viewer_sees_the_paused_workflows_but_may_not_pause_one(client):
    viewer = logged_in(client, "viewer")
    assert viewer.get(LIST).status_code == 200
    assert viewer.get(LIST + "add/").status_code == 403
    assert viewer.post(LIST + "add/", {"workflow_id": "demo"}).status_code == 403
    assert not PausedWorkflow.objects.exists()


def test_a_workflow_paused_already_is_not_offered_and_cannot_be_paused_twice(client):
    operator = logged_in(client, "operator")
    operator.post(LIST + "add/", {"workflow_id": "demo"})
    page = operator.get(LIST + "add/").content.decode()
    assert 'value="demo"' not in page
    response = operator.post(LIST + "add/", {"workflow_id": "demo"})
    assert response.status_code == 200 and "errorlist" in response.content.decode()
    assert PausedWorkflow.objects.count() == 1
