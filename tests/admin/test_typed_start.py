"""The admin's start form for one workflow (``?workflow=<name>``): a field per parameter, typed by
its annotation; what the fields give goes through the start's one check, and a refusal is a
form error, never a 500."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.urls import reverse

from tests import typed_workflows
from workflows_app.models import Execution

pytestmark = pytest.mark.django_db

START = reverse("admin:workflows_app_execution_add")
TYPED = f"{START}?workflow=typed"
#: What the form posts for every option that is not a parameter.
OPTIONS = {"workflow": "typed", "if_busy": "refuse", "failure_mode": "", "deployment_id": ""}


@pytest.fixture
def operator(client, monkeypatch):
    typed_workflows.register(monkeypatch)
    user = get_user_model().objects.create_user("operator", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="workflows_app", codename__in=["view_execution", "add_execution"]))
    client.force_login(user)
    return client


def field(page, name) -> str:
    """The HTML of the input, select or textarea of the parameter ``name``."""
    found = re.search(rf'<(input|select|textarea)[^>]*name="parameter:{name}"[^>]*>(.*?</\1>)?', page, re.S)
    assert found, f"no field for {name}"
    return found.group(0)


def test_each_parameter_gets_a_field_of_its_type(operator):
    page = operator.get(TYPED).content.decode()
    assert 'type="hidden" name="workflow" value="typed"' in page and "Start typed" in page
    assert 'type="number"' in field(page, "n") and "required" in field(page, "n")
    assert 'type="number"' in field(page, "ratio") and 'value="0.5"' in field(page, "ratio")
    assert 'type="text"' in field(page, "label") and 'value="vm"' in field(page, "label")
    assert 'type="checkbox"' in field(page, "enabled") and "checked" in field(page, "enabled")
    size = field(page, "size")
    assert size.startswith("<select") and '<option value="small" selected>small</option>' in size
    assert '<option value="large">large</option>' in size
    for name in ("tags", "disk", "extra"):
        assert field(page, name).startswith("<textarea"), name
    assert "[]" in field(page, "tags")
    assert 'name="parameters"' not in page, "no JSON object of all the parameters"
    assert "one of &quot;small&quot;, &quot;large&quot;" in page or 'one of "small", "large"' in page


def test_the_fields_values_start_the_execution_as_json_values(operator):
    response = operator.post(TYPED, {**OPTIONS, "parameter:n": "2", "parameter:size": "large", "parameter:ratio": "1.5",
                                     "parameter:label": "db", "parameter:tags": '["a", "b"]',
                                     "parameter:disk": '{"size_gb": 10}'})
    execution = Execution.objects.get()
    assert response.status_code == 302 and response["Location"].endswith(f"/{execution.pk}/change/")
    # A blank field with a default is left out (the function's own is used); an unchecked box is false.
    assert execution.parameters == {"n": 2, "size": "large", "ratio": 1.5, "label": "db", "enabled": False,
                                    "tags": ["a", "b"], "disk": {"size_gb": 10}}
    assert execution.workflow_id == "typed"


@pytest.mark.parametrize("data, where, says", [
    ({"parameter:n": "three"}, "parameter:n", "Enter a whole number."),
    ({}, "parameter:n", "This field is required."),
    ({"parameter:n": "1", "parameter:size": "huge"}, "parameter:size", "Select a valid choice."),
    ({"parameter:n": "1", "parameter:ratio": "nan"}, "parameter:ratio", "Enter a number."),
    ({"parameter:n": "1", "parameter:tags": "[1, 2"}, "parameter:tags", "not JSON"),
    # What the fields take but the workflow does not: the start's check, as a form error.
    ({"parameter:n": "1", "parameter:tags": '["a", 2]'}, None,
     "workflow 'typed': parameter 'tags[1]': expected string, got integer 2"),
    ({"parameter:n": "1", "parameter:disk": '{"size_gb": "big"}'}, None,
     "workflow 'typed': parameter 'disk.size_gb': expected integer, got string \"big\""),
])
def test_a_value_that_does_not_fit_is_a_form_error_and_starts_nothing(operator, data, where, says):
    response = operator.post(TYPED, {**OPTIONS, **data})
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert says in " ".join(errors.get(where or "__all__", [])), errors
    assert not Execution.objects.exists()


def test_the_json_form_of_any_workflow_goes_through_the_same_check(operator):
    response = operator.post(START, {**OPTIONS, "parameters": '{"n": "three"}'})
    assert response.status_code == 200
    assert ("workflow 'typed': parameter 'n': expected integer, got string \"three\""
            in " ".join(response.context["form"].errors["parameters"]))
    assert not Execution.objects.exists()
    page = operator.get(START).content.decode()
    assert '<a href="?workflow=typed"' in page, "the list of workflows leads to each one's own form"


def test_a_workflow_that_is_not_registered_falls_back_to_the_json_form(operator):
    response = operator.get(f"{START}?workflow=nope", follow=True)
    assert response.status_code == 200 and 'name="parameters"' in response.content.decode()
    assert any("no workflow 'nope'" in str(m) for m in response.context["messages"])


def test_a_post_for_another_workflow_than_the_form_is_for_is_refused(operator):
    response = operator.post(TYPED, {**OPTIONS, "workflow": "demo", "parameter:n": "1"})
    assert response.status_code == 200 and "workflow" in response.context["form"].errors
    assert not Execution.objects.exists()
