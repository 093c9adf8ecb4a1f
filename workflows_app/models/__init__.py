"""The stored state of Switchyard: executions, operations with their dependencies, events."""

from workflows_app.models.event import Event
from workflows_app.models.execution import Execution
from workflows_app.models.operation import Operation, OperationDependency

__all__ = ["Event", "Execution", "Operation", "OperationDependency"]
