"""What an operation produces on a real agent and cannot be stored — a lone surrogate (what
``os.listdir`` gives for a file name that is not UTF-8), a NUL, NaN, a value nested 900 deep, a
value over MAX_PAYLOAD_BYTES — fails that operation for good with the reason, and the execution
ends: on PostgreSQL such a report used to be refused by the database, and the operation stayed
``started`` with nothing running it. An error that quotes such text is stored cleaned, every try.
"""

import pytest

from tests.integration.test_engine import finish, operations
from tests.workflows import bad_value
from workflows_app import services, values
from workflows_app.models import Event

pytestmark = pytest.mark.integration


@pytest.mark.django_db(transaction=True)
def test_results_that_cannot_be_stored_fail_their_operation_and_the_execution_ends(stack):
    stack.start_manager(concurrency=2)
    agent = stack.agent_name("values")
    stack.start_agent(agent, concurrency=3)
    stack.wait_for_agent(agent)
    kinds = ["surrogate", "nul", "nan", "deep", "large"]
    executions = {kind: services.start("it_bad_value", {"where": "result", "kind": kind, "agent": agent})
                  for kind in kinds}
    erring = services.start("it_bad_value", {"where": "error", "kind": "ok", "agent": agent})

    for kind, execution in executions.items():
        done = finish(stack, execution, "failed")
        produce = operations(execution)["produce"]
        assert (produce.state, produce.attempt, produce.result) == ("failed", 1, None), f"{kind}: not retried"
        assert produce.error["type"] == "ValueRefused" and "the operation's result" in produce.error["message"], kind
        assert "produce" in done.error, kind
    assert len(values.check(bad_value("large"), "v", limit=10**8)["blob"]) > 2 * 1024 * 1024, "over the default limit"

    done = finish(stack, erring, "failed")
    produce = operations(erring)["produce"]
    assert (produce.state, produce.attempt) == ("failed", 4), "retried as a RecoverableError: 1 + 3 retries"
    assert produce.error["message"] == "cannot read x-\\udcff \\x00 end"
    assert Event.objects.filter(execution_id=erring.pk, type="task_rescheduled").count() == 3
