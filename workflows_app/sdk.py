"""The public surface for workflow authors.

    from workflows_app.sdk import workflow, operation, RecoverableError, NonRecoverableError
"""

from workflows_app.errors import (
    EventTimeout,
    NonDeterministicWorkflow,
    NonRecoverableError,
    OperationCancelled,
    RecoverableError,
    StepFailed,
)
from workflows_app.engine.listeners import register_status_listener, unregister_status_listener
from workflows_app.registry import operation, workflow

__all__ = [
    # registration
    "workflow",
    "operation",
    # errors
    "RecoverableError",
    "NonRecoverableError",
    "OperationCancelled",
    "EventTimeout",
    "StepFailed",
    "NonDeterministicWorkflow",
    # lifecycle listeners
    "register_status_listener",
    "unregister_status_listener",
]
