"""The error tree: every error pickles with its attributes (it may cross a process boundary in a
Celery result), and the workflow-facing ones say what happened."""

import pickle

from workflows_app.errors import NonDeterministicWorkflow, StepFailed


def test_step_failed_pickles_with_its_step_error_and_cause():
    error = StepFailed("pack", {"type": "Cancelled", "message": "cancelled (fail_fast): charge failed"}, "charge")
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.step, copy.error, copy.cause) == ("pack", error.error, "charge")
    assert str(copy) == "step 'pack' failed: cancelled (fail_fast): charge failed"


def test_non_deterministic_workflow_names_the_step_the_stored_call_and_the_asked_one():
    error = NonDeterministicWorkflow("x", {"operation": "a", "args": [1], "kwargs": {}},
                                     {"operation": "b", "args": [1], "kwargs": {"k": 2}})
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.step, copy.stored, copy.requested) == ("x", error.stored, error.requested)
    assert str(copy).startswith("non-deterministic workflow: step 'x' was stored as a args=[1] kwargs={}, "
                                "and this replay asked for b args=[1] kwargs={'k': 2}")
