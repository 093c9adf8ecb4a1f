"""What the engine's tests share: a pass of the dispatcher in the test process, as a manager
runs one when an advance asks for it."""

from workflows_app.engine import dispatcher
from workflows_app.models import Execution


def run_pass(execution) -> Execution:
    """One pass over ``execution``; the execution as it is after it."""
    dispatcher.run_pass(execution.pk)
    execution.refresh_from_db()
    return execution
