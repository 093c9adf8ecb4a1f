"""Who may do what in the admin, for each kind of staff user — without a
permission, a viewer (view_execution), an operator (view, add, change), a forcer (an operator
with force_execution) and a superuser: the pages they may read, the buttons and list actions
they are offered, what a forged POST of an action they may not take does (a message, nothing
changed), and a workflow registered with a permission of its own: neither shown nor offered in
the start form to who lacks that permission."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from agents.models import Agent
from tests.api.conftest import FORCER, GUARDED, GUARDED_PERMISSION, OPERATOR, VIEWER, make_user, register_guarded
from tests.admin.test_admin import LIST, START, act_url, graph_url, messages_of, page_url
from workflows_app.models import Event, Execution
from workflows_app.states import ExecutionStatus, OperationState

pytestmark = pytest.mark.django_db

KINDS = ["nobody", "viewer", "operator", "forcer", "superuser"]
PERMISSIONS = {"nobody": (), "viewer": VIEWER, "operator": OPERATOR, "forcer": FORCER}
#: On a started execution and on a failed one: the buttons (and the list's actions) each kind is offered.
BUTTONS = {
    "nobody": ([], []),
    "viewer": ([], []),
    "operator": (["cancel", "resume", "pause"], ["resume"]),
    "forcer": (["cancel", "force-cancel", "kill", "resume", "pause"], ["resume", "force-resume"]),
    "superuser": (["cancel", "force-cancel", "kill", "resume", "pause"], ["resume", "force-resume"]),
}
LIST_ACTIONS = {
    "viewer": [],
    "operator": ["cancel_selected", "resume_selected", "pause_selected", "unpause_selected"],
    "forcer": ["cancel_selected", "force_cancel_selected", "kill_selected", "resume_selected",
               "force_resume_selected", "pause_selected", "unpause_selected"],
}


@pytest.fixture
def login(client):
    """``login(kind, *more_permissions)``: the test client, logged in as a staff user of that kind."""

    def log_in(kind, *more):
        if kind == "superuser":
            user = get_user_model().objects.create_superuser("super", "super@localhost", "pw")
        else:
            user = make_user(kind, PERMISSIONS[kind] + more, is_staff=True)
        client.force_login(user)
        return client

    return log_in




def buttons(page):
    return re.findall(r'data-action="([a-z-]+)"', page.content.decode())


def list_actions(page):
    return re.findall(r'<option value="([a-z_]+)"', page.content.decode())


def stored():
    return sorted(Execution.objects.values_list("id", "status")), Event.objects.count()


def record_pages(execution):
    """The pages of the execution's records: its operations and events, listed and one by one."""
    operation, event = execution.operations.first(), Event.objects.filter(execution=execution).first()
    return [reverse("admin:workflows_app_operation_changelist"), reverse("admin:workflows_app_event_changelist"),
            reverse("admin:workflows_app_operation_change", args=[operation.pk]),
            reverse("admin:workflows_app_event_change", args=[event.pk])]


@pytest.fixture
def execution(running):
    Event.objects.create(execution=running, type="log", message="hello")
    return running


@pytest.mark.parametrize("kind", KINDS)
def test_every_page_needs_view_execution_and_nothing_else(login, execution, kind):
    client = login(kind)
    Agent.objects.create(name="host-1")
    pages = [LIST, page_url(execution), graph_url(execution), reverse("admin:agents_agent_changelist"),
             *record_pages(execution)]
    expected = 403 if kind == "nobody" else 200
    assert {url: client.get(url).status_code for url in pages} == {
        url: 404 if expected == 403 and url == graph_url(execution) else expected for url in pages}
    index = client.get(reverse("admin:index")).content.decode()
    assert ("Agents" in index and "Executions" in index) == (kind != "nobody")


@pytest.mark.parametrize("kind", KINDS[1:])
def test_the_buttons_and_list_actions_are_what_the_user_may_do(login, make_execution, kind):
    client = login(kind)
    started, failed = make_execution(status=ExecutionStatus.STARTED), make_execution(status=ExecutionStatus.FAILED)
    assert (buttons(client.get(page_url(started))), buttons(client.get(page_url(failed)))) == BUTTONS[kind]
    offered = list_actions(client.get(LIST))
    if kind == "superuser":
        assert set(LIST_ACTIONS["forcer"]) < set(offered)
    else:
        assert offered == LIST_ACTIONS[kind]


@pytest.mark.parametrize("kind, action", [("viewer", action) for action in BUTTONS["forcer"][0] + ["force-resume"]]
                         + [("operator", action) for action in ["force-cancel", "kill", "force-resume"]])
def test_a_forged_post_of_an_action_the_user_may_not_take_is_a_message_and_changes_nothing(
        login, make_execution, outbox, kind, action):
    client = login(kind)
    execution = make_execution(status=ExecutionStatus.FAILED if "resume" in action else ExecutionStatus.STARTED)
    before = stored()
    response = client.post(act_url(execution), {"action": action}, follow=True)
    assert response.status_code == 200 and b"Are you sure" not in response.content, "no confirmation page first"
    [said] = messages_of(response)
    assert said.startswith(f"{action} refused: {kind} may not") and str(execution.pk) in said, said
    needed = "workflows_app.force_execution" if action not in ("cancel", "resume", "pause") else "workflows_app.change_execution"
    assert needed in said
    response = client.post(act_url(execution), {"action": action, "confirmed": "yes"}, follow=True)
    assert messages_of(response)[0].startswith(f"{action} refused:")
    assert stored() == before and not outbox["kill"], "nothing changed, nothing signalled"


def test_a_forged_list_action_of_a_viewer_changes_nothing(login, make_execution, outbox):
    client = login("viewer")
    execution = make_execution(status=ExecutionStatus.STARTED)
    before = stored()
    for action in LIST_ACTIONS["forcer"]:
        client.post(LIST, {"action": action, "_selected_action": [execution.pk], "confirmed": "yes"})
    assert stored() == before and not outbox["kill"]


# --- a workflow registered with a permission of its own --------------------------------------------


@pytest.fixture
def two(make_execution, make_operation, monkeypatch):
    """A started execution of ``demo`` and one of the guarded workflow, each with an operation and an event."""
    register_guarded(monkeypatch)
    plain, hidden = make_execution(workflow_id="demo"), make_execution(workflow_id=GUARDED)
    for execution in (plain, hidden):
        make_operation(OperationState.STARTED, execution, name=f"step-of-{execution.workflow_id}", attempt=1)
        Event.objects.create(execution=execution, type="log", message=f"event of {execution.workflow_id}")
    return plain, hidden


def test_without_the_workflows_own_permission_its_executions_are_not_shown_nor_steered(login, two, outbox):
    plain, hidden = two
    client = login("forcer")
    listed = client.get(LIST).content.decode()
    assert str(plain.pk)[:8] in listed and str(hidden.pk)[:8] not in listed
    assert f"?workflow_id={GUARDED}" not in listed, "nor is the workflow a filter"
    response = client.get(page_url(hidden), follow=True)
    assert messages_of(response) == [f"no execution {str(hidden.pk)!r}"]
    assert client.get(graph_url(hidden)).status_code == 404
    operations, events, operation_page, event_page = record_pages(hidden)
    assert "step-of-demo" in client.get(operations).content.decode()
    assert f"step-of-{GUARDED}" not in client.get(operations).content.decode()
    assert f"event of {GUARDED}" not in client.get(events).content.decode()
    for url in (operation_page, event_page):
        assert client.get(url, follow=True).redirect_chain, f"{url}: not found, back to the list"
    before = stored()
    client.post(act_url(hidden), {"action": "kill", "confirmed": "yes"})
    client.post(LIST, {"action": "cancel_selected", "_selected_action": [hidden.pk]})
    assert stored() == before and not outbox["kill"]
    form = client.get(START).context["form"]
    assert "demo" in dict(form.fields["workflow"].choices) and GUARDED not in dict(form.fields["workflow"].choices)
    refused = client.post(START, {"workflow": GUARDED, "parameters": "{}", "if_busy": "refuse"})
    assert refused.status_code == 200 and refused.context["form"].errors["workflow"]
    assert stored() == before


def test_with_the_workflows_own_permission_its_executions_are_shown_and_steered(login, two, outbox):
    _, hidden = two
    client = login("forcer", GUARDED_PERMISSION)
    assert str(hidden.pk)[:8] in client.get(LIST).content.decode()
    assert buttons(client.get(page_url(hidden))) == ["cancel", "force-cancel", "kill", "resume", "pause"]
    assert f"step-of-{GUARDED}" in client.get(reverse("admin:workflows_app_operation_changelist")).content.decode()
    response = client.post(act_url(hidden), {"action": "cancel"}, follow=True)
    assert messages_of(response) == [f"cancel: execution {hidden.pk} is now cancelling"]
    assert GUARDED in dict(client.get(START).context["form"].fields["workflow"].choices)
    assert client.post(START, {"workflow": GUARDED, "parameters": "{}", "if_busy": "refuse"}).status_code == 302
    assert Execution.objects.filter(workflow_id=GUARDED).count() == 2
