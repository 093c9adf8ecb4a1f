"""``manage.py start_execution`` with a typed workflow: a parameter of the wrong type is refused
as the API refuses it, in one line (``CommandError``), and a parameter annotated ``str`` takes
what is typed as it is."""

import io

import pytest
from django.core.management import CommandError, call_command

from tests import typed_workflows
from workflows_app.models import Execution

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def typed(monkeypatch):
    return typed_workflows.register(monkeypatch)


def start(*params):
    out = io.StringIO()
    call_command("start_execution", "typed", *[arg for p in params for arg in ("--param", p)],
                 stdout=out, stderr=io.StringIO())
    return Execution.objects.get(pk=out.getvalue().strip())


def test_a_parameter_of_the_wrong_type_is_one_line_naming_it_and_starts_nothing():
    with pytest.raises(CommandError) as refused:
        start("n=three", "tags=[1]")
    assert str(refused.value) == ("workflow 'typed': parameter 'n': expected integer, got string \"three\"; "
                                  "parameter 'tags[0]': expected string, got integer 1")
    assert "\n" not in str(refused.value) and not Execution.objects.exists()


def test_values_are_read_as_json_but_for_a_parameter_annotated_str():
    execution = start("n=3", "label=1.10", "size=large", "enabled=false", "disk={\"size_gb\": 2}", "extra=1.10")
    assert execution.parameters == {"n": 3, "label": "1.10", "size": "large", "enabled": False,
                                    "disk": {"size_gb": 2}, "extra": 1.1}
