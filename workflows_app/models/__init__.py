"""The stored state of Switchyard: executions, operations with their dependencies, events, and
the waits of suspended workflows, schedules and their slots, concurrency keys, the sends that rate
limits count, the idempotency keys of starts, the workflows paused as a
whole, and the key that signs what is sent to agents."""

from workflows_app.models.event import Event
from workflows_app.models.execution import Execution
from workflows_app.models.flow import RateSend
from workflows_app.models.idempotency import IdempotencyKey
from workflows_app.models.operation import Operation, OperationDependency
from workflows_app.models.pause import PausedWorkflow
from workflows_app.models.schedule import ConcurrencyKey, Schedule, ScheduleSlot
from workflows_app.models.signing_key import SigningKey
from workflows_app.models.wait import Wait

__all__ = ["ConcurrencyKey", "Event", "Execution", "IdempotencyKey", "Operation", "OperationDependency", "PausedWorkflow", "RateSend",
           "Schedule", "ScheduleSlot", "SigningKey", "Wait"]
