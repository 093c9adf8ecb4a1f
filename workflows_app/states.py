"""Statuses of executions, states of operations, and the tables of their transitions.

Each list is defined once, here, with its groups beside it; code compares against these names,
never against string literals. ``workflows_app.transitions`` is the only writer and enforces
the tables below.
"""

from django.db import models


class ExecutionStatus(models.TextChoices):
    PENDING = "pending"
    QUEUED = "queued"
    STARTED = "started"
    PAUSED = "paused"
    CANCELLING = "cancelling"
    FORCE_CANCELLING = "force_cancelling"
    KILL_CANCELLING = "kill_cancelling"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


class OperationState(models.TextChoices):
    PENDING = "pending"
    SENDING = "sending"
    SENT = "sent"
    STARTED = "started"
    RESCHEDULED = "rescheduled"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class StepKind(models.TextChoices):
    """What a step of an execution runs: an operation on an agent, or a child execution."""

    OPERATION = "operation"
    WORKFLOW = "workflow"


class FailureMode(models.TextChoices):
    NO_NEW_CALLS = "no_new_calls"
    CONTINUE_WHILE_POSSIBLE = "continue_while_possible"
    FAIL_FAST = "fail_fast"


class OverlapPolicy(models.TextChoices):
    """What a schedule does with a slot that falls due while its previous execution is active."""

    SKIP = "skip"
    BUFFER_ONE = "buffer_one"
    ALLOW = "allow"
    CANCEL_OTHER = "cancel_other"


class SlotOutcome(models.TextChoices):
    """What became of one slot of a schedule (``ScheduleSlot``)."""

    STARTED = "started"
    BUFFERED = "buffered"
    SKIPPED = "skipped"
    MISSED = "missed"


class EventType(models.TextChoices):
    WORKFLOW_STARTED = "workflow_started"
    WORKFLOW_RESUMED = "workflow_resumed"
    WORKFLOW_PAUSED = "workflow_paused"
    WORKFLOW_UNPAUSED = "workflow_unpaused"
    WORKFLOW_CANCELLING = "workflow_cancelling"
    WORKFLOW_COMPLETED = "workflow_completed"
    WORKFLOW_FAILED = "workflow_failed"
    WORKFLOW_CANCELLED = "workflow_cancelled"
    WORKFLOW_TIMED_OUT = "workflow_timed_out"
    TASK_SENDING = "task_sending"
    TASK_SENT = "task_sent"
    TASK_STARTED = "task_started"
    TASK_SUCCEEDED = "task_succeeded"
    TASK_FAILED = "task_failed"
    TASK_RESCHEDULED = "task_rescheduled"
    TASK_CANCELLED = "task_cancelled"
    EVENT_RECEIVED = "event_received"
    LISTENER_FAILED = "listener_failed"
    STALE_REPORT = "stale_report"
    WORKFLOW_RETRYING = "workflow_retrying"
    CHILD_STARTED = "child_started"
    LOG = "log"


_E = ExecutionStatus
_O = OperationState

# --- execution groups ------------------------------------------------------------------
EXECUTION_TERMINAL = frozenset({_E.COMPLETED, _E.FAILED, _E.CANCELLED, _E.TIMED_OUT})
EXECUTION_ACTIVE = frozenset(set(_E) - EXECUTION_TERMINAL)
#: Not yet running: any stop action ends these ``cancelled`` at once.
EXECUTION_WAITING = frozenset({_E.PENDING, _E.QUEUED})
EXECUTION_CANCELLING = frozenset({_E.CANCELLING, _E.FORCE_CANCELLING, _E.KILL_CANCELLING})
#: A dispatcher carries these on.
EXECUTION_RUNNING = frozenset({_E.STARTED}) | EXECUTION_CANCELLING
#: Their operations may still run on the workers (a paused execution sends nothing new, but what
#: it sent goes on): a starting manager reconciles what runs of these.
EXECUTION_WITH_ATTEMPTS = EXECUTION_RUNNING | {_E.PAUSED}
#: An agent's claim of an attempt of these is answered "run": a paused execution's attempts that
#: were sent before the pause go on, as its started ones do.
EXECUTION_CLAIMABLE = (_E.STARTED, _E.PAUSED)
#: These hold their deployment: a new execution of it is refused or waits, queued.
EXECUTION_HOLDING_DEPLOYMENT = frozenset(EXECUTION_ACTIVE - {_E.QUEUED})
#: Where resume and force-resume are allowed (in this order in their refusals).
EXECUTION_RESUMABLE = (_E.STARTED, _E.CANCELLED, _E.FAILED)
EXECUTION_FORCE_RESUMABLE = (_E.CANCELLED, _E.FAILED)
#: A child its parent's resume resumes: one that failed or was cancelled. One that completed has
#: a succeeded step, never reset; one that timed out cannot be resumed, so its step fails again.
EXECUTION_CHILD_RESUMABLE = (_E.FAILED, _E.CANCELLED)

EXECUTION_TRANSITIONS = {
    _E.PENDING: frozenset({_E.QUEUED, _E.STARTED, _E.CANCELLED, _E.FAILED}),
    _E.QUEUED: frozenset({_E.PENDING, _E.CANCELLED}),
    # started -> started: resume of a stuck execution (new token, same status).
    _E.STARTED: frozenset({_E.COMPLETED, _E.FAILED, _E.TIMED_OUT, _E.CANCELLING,
                           _E.FORCE_CANCELLING, _E.KILL_CANCELLING, _E.STARTED, _E.PAUSED}),
    # paused -> started: unpause. Cancel, force-cancel and kill work as from started.
    _E.PAUSED: frozenset({_E.STARTED, _E.CANCELLING, _E.FORCE_CANCELLING, _E.KILL_CANCELLING}),
    _E.CANCELLING: frozenset({_E.CANCELLED, _E.FAILED, _E.FORCE_CANCELLING, _E.KILL_CANCELLING}),
    _E.FORCE_CANCELLING: frozenset({_E.CANCELLED, _E.KILL_CANCELLING}),
    _E.KILL_CANCELLING: frozenset({_E.CANCELLED}),
    _E.COMPLETED: frozenset(),
    _E.FAILED: frozenset({_E.STARTED}),  # resume, force-resume
    _E.CANCELLED: frozenset({_E.STARTED}),  # resume, force-resume
    _E.TIMED_OUT: frozenset(),
}

# --- operation groups ------------------------------------------------------------------
OPERATION_TERMINAL = frozenset({_O.SUCCEEDED, _O.FAILED, _O.CANCELLED})
#: Ended without succeeding: what a wait for the step raises ``StepFailed`` for.
OPERATION_ENDED_BADLY = (_O.FAILED, _O.CANCELLED)
OPERATION_ACTIVE = frozenset(set(_O) - OPERATION_TERMINAL)
#: Not started on an agent: cancel marks these ``cancelled`` at once.
OPERATION_NOT_STARTED = frozenset({_O.PENDING, _O.RESCHEDULED, _O.SENDING, _O.SENT})
#: A message is (or may be) out for these: the agents are asked about them after a restart.
OPERATION_IN_FLIGHT = frozenset({_O.SENDING, _O.SENT, _O.STARTED})
#: What an operation's limits may hold back: a step that may be sent, or a retry that fell due.
OPERATION_WAITING_TO_SEND = (_O.PENDING, _O.RESCHEDULED)
#: What holds a slot of an operation's concurrency (a tuple: it is in a migration).
OPERATION_HOLDING_SLOT = (_O.SENDING, _O.SENT, _O.STARTED)
#: In flight, or waiting for a retry (a tuple: it is in a migration, which needs one order).
OPERATION_IN_FLIGHT_OR_WAITING = (_O.SENDING, _O.SENT, _O.STARTED, _O.RESCHEDULED)
#: What resume puts back to pending; force-resume adds the in-flight states.
OPERATION_RESUMABLE = frozenset({_O.RESCHEDULED, _O.FAILED, _O.CANCELLED})
# Where an attempt's own outcome report moves it.
OPERATION_ENDED_BY_REPORT = frozenset({_O.SUCCEEDED, _O.FAILED, _O.RESCHEDULED})
# Waiting for its agent: it may start there.
OPERATION_AT_AGENT = frozenset({_O.SENDING, _O.SENT})
OPERATION_FORCE_RESUMABLE = OPERATION_RESUMABLE | OPERATION_IN_FLIGHT

OPERATION_TRANSITIONS = {
    _O.PENDING: frozenset({_O.SENDING, _O.CANCELLED}),
    # sending/sent -> rescheduled|failed: a lost attempt, a retryable failure.
    _O.SENDING: frozenset({_O.SENT, _O.RESCHEDULED, _O.FAILED, _O.CANCELLED, _O.PENDING}),
    _O.SENT: frozenset({_O.STARTED, _O.RESCHEDULED, _O.FAILED, _O.CANCELLED, _O.PENDING}),
    _O.STARTED: frozenset({_O.SUCCEEDED, _O.FAILED, _O.RESCHEDULED, _O.CANCELLED, _O.PENDING}),
    _O.RESCHEDULED: frozenset({_O.SENDING, _O.CANCELLED, _O.PENDING}),
    _O.SUCCEEDED: frozenset(),
    _O.FAILED: frozenset({_O.PENDING}),
    _O.CANCELLED: frozenset({_O.PENDING}),
}

#: The timestamp field written when an operation enters each state.
OPERATION_STATE_TIMESTAMP = {state: f"{state.value}_at" for state in _O}


def execution_event_type(source, target):
    """The event that records an execution's move from ``source`` to ``target``."""
    if target == _E.STARTED:
        return {_E.PENDING: EventType.WORKFLOW_STARTED, _E.PAUSED: EventType.WORKFLOW_UNPAUSED}.get(
            source, EventType.WORKFLOW_RESUMED)
    return _EXECUTION_EVENT_BY_TARGET[target]


_EXECUTION_EVENT_BY_TARGET = {
    # Entering and leaving the queue has no event type of its own: a log line.
    _E.PENDING: EventType.LOG,
    _E.QUEUED: EventType.LOG,
    _E.PAUSED: EventType.WORKFLOW_PAUSED,
    _E.CANCELLING: EventType.WORKFLOW_CANCELLING,
    _E.FORCE_CANCELLING: EventType.WORKFLOW_CANCELLING,
    _E.KILL_CANCELLING: EventType.WORKFLOW_CANCELLING,
    _E.COMPLETED: EventType.WORKFLOW_COMPLETED,
    _E.FAILED: EventType.WORKFLOW_FAILED,
    _E.CANCELLED: EventType.WORKFLOW_CANCELLED,
    _E.TIMED_OUT: EventType.WORKFLOW_TIMED_OUT,
}

OPERATION_EVENT_BY_TARGET = {
    # Back to pending is resume's reset: a log line, as no event type stands for it.
    _O.PENDING: EventType.LOG,
    _O.SENDING: EventType.TASK_SENDING,
    _O.SENT: EventType.TASK_SENT,
    _O.STARTED: EventType.TASK_STARTED,
    _O.RESCHEDULED: EventType.TASK_RESCHEDULED,
    _O.SUCCEEDED: EventType.TASK_SUCCEEDED,
    _O.FAILED: EventType.TASK_FAILED,
    _O.CANCELLED: EventType.TASK_CANCELLED,
}


class WarningCode(models.TextChoices):
    """What a warning of an execution (``queries.warnings``) is about."""

    UNKNOWN_AGENT = "unknown_agent"  # steps sent to an agent never seen, or offline
    RATE_LIMITED = "rate_limited"  # a step waits for its operation's rate limit
    CONCURRENCY_LIMITED = "concurrency_limited"  # a step waits for a free slot of its operation's concurrency


class FlowWait(models.TextChoices):
    """What a step that may be sent waits for (``Operation.flow_wait``; "" for nothing): the
    limits of its operation (``workflows_app.flow``)."""

    NONE = "", "nothing"
    QUEUED = "queued", "the managers' decision"  # handed over to the limits; decided at once
    RATE_LIMIT = "rate_limit", "its operation's rate limit"
    CONCURRENCY = "concurrency", "a free slot of its operation's concurrency"


#: What a step held back by a limit waits for (``Operation.flow_wait``), as operators are told.
FLOW_LIMITS = (FlowWait.RATE_LIMIT, FlowWait.CONCURRENCY)


class WaitKind(models.TextChoices):
    """What a stored wait (``workflows_app.models.Wait``) waits for."""

    EVENT = "event"  # ctx.await_event / ctx.wait_for_event
    SLEEP = "sleep"  # ctx.sleep
    RETRY = "retry"  # the backoff before the next try of a workflow declared on_unhandled="retry"


class WaitOutcome(models.TextChoices):
    """How a stored wait ended; ``waiting`` until then. Once ended it never changes, so every
    replay of the workflow sees the same outcome."""

    WAITING = "waiting"
    RECEIVED = "received"  # it took an event
    TIMED_OUT = "timed_out"  # an event wait's deadline passed first
    ELAPSED = "elapsed"  # a sleep's deadline passed
    CANCELLED = "cancelled"  # ctx.cancel_step / handle.cancel()
