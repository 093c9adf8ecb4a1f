"""What a start through the API costs, and that what it skips changes nothing of the answers.

``POST /executions`` stores the execution and its event (on PostgreSQL in one statement:
``transitions.create_execution``) and answers with the execution as stored: just created, it
has no operations, so its ``operations_summary`` (all zeros) is not counted by a query. The
answers' serializer is built once (``execution_detail``), and the input serializers copy their
fields shallowly (``StrictSerializer.get_fields``).
"""

import pytest
from django.db import connection

from tests.api.conftest import API, PERMISSION_QUERIES
from workflows_app.api.serializers import (
    NO_OPERATIONS,
    ExecutionDetailSerializer,
    StartExecutionSerializer,
    execution_detail,
)
from workflows_app.models import Event
from workflows_app.states import ExecutionStatus, OperationState

#: The queries of one start without a deployment: PostgreSQL's one statement; elsewhere two INSERTs
#: (here inside the test's transaction, so without BEGIN and COMMIT); and the user's permissions.
START_QUERIES = (1 if connection.vendor == "postgresql" else 2) + PERMISSION_QUERIES


def test_a_start_runs_one_statement_on_postgresql_and_counts_no_operations(api, django_assert_num_queries):
    with django_assert_num_queries(START_QUERIES):
        response = api.post(f"{API}/executions", {"workflow_id": "demo", "parameters": {"n": 1}}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["operations_summary"] == dict.fromkeys(OperationState.values, 0)
    assert Event.objects.filter(execution_id=body["id"]).count() == 1


def test_get_answers_the_counts_of_the_operations_as_they_are(api, running):
    body = api.get(f"{API}/executions/{running.pk}").json()
    assert body["operations_summary"] == {**NO_OPERATIONS, "succeeded": 1, "started": 1, "pending": 1}


def test_one_serializer_shows_each_execution_as_a_new_one_would(make_execution, running):
    """``execution_detail`` reuses one serializer: nothing of one execution shows in the next."""
    other = make_execution(status=ExecutionStatus.PENDING, workflow_id="other", parameters={"x": [1, 2]})
    for execution in (running, other, running):
        shown = execution_detail(execution)
        assert shown == ExecutionDetailSerializer(execution).data
    assert execution_detail(other, NO_OPERATIONS)["operations_summary"] == dict(NO_OPERATIONS)


@pytest.mark.parametrize("summary", [None, NO_OPERATIONS])
def test_the_answer_is_the_same_whether_the_counts_are_given_or_counted(make_execution, summary):
    execution = make_execution(status=ExecutionStatus.PENDING)
    assert execution_detail(execution, summary) == execution_detail(execution)


def test_each_input_serializer_validates_with_fields_of_its_own():
    first = StartExecutionSerializer(data={"workflow_id": "demo", "timeout": "10"})
    second = StartExecutionSerializer(data={"workflow_id": "demo", "timeout": 10, "parameters": {"n": 1}})
    assert not first.is_valid() and set(first.errors) == {"timeout"}
    assert second.is_valid(), second.errors
    assert second.validated_data["timeout"] == 10 and second.validated_data["parameters"] == {"n": 1}
    for name, field in second.fields.items():
        assert field is not first.fields[name] and field.parent is second and first.fields[name].parent is first
        assert StartExecutionSerializer._declared_fields[name].parent is None, "the declared field stays unbound"
