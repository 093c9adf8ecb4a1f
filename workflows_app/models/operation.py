import uuid

from django.db import models

from workflows_app import clock
from workflows_app.states import (
    OPERATION_ACTIVE,
    OPERATION_HOLDING_SLOT,
    OPERATION_IN_FLIGHT_OR_WAITING,
    OPERATION_TERMINAL,
    FlowWait,
    OperationState,
    StepKind,
)


class OperationQuerySet(models.QuerySet):
    def active(self):
        return self.filter(state__in=OPERATION_ACTIVE)

    def terminal(self):
        return self.filter(state__in=OPERATION_TERMINAL)


class Operation(models.Model):
    """One step of an execution, sent as a Celery task to its agent's queue.

    ``state`` changes only through :mod:`workflows_app.transitions`. ``attempt`` grows by one on
    every send; the Celery task id is derived from ``id`` and ``attempt`` (``task_id``), and an
    agent runs an attempt only while it is the current one (fencing).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of its own: every index below that starts with it serves it.
    execution = models.ForeignKey("workflows_app.Execution", on_delete=models.CASCADE, related_name="operations",
                                  db_index=False)
    name = models.CharField(max_length=255, help_text="the step key, unique in its execution")
    # An operation sent to an agent, or a child execution (``operation`` is then the child's
    # workflow, ``kwargs`` its parameters and options, and the step's state follows the child).
    kind = models.CharField(max_length=20, choices=StepKind.choices, default=StepKind.OPERATION,
                            db_default=StepKind.OPERATION)
    operation = models.CharField(max_length=255, help_text="the registered operation (or child workflow) name")
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    agent = models.CharField(max_length=200, help_text="the queue the operation is sent to")
    # A local step runs in the manager's pass over its execution, with no message
    # (``workflows_app.local_steps``): its agent is the management queue's name.
    local = models.BooleanField(default=False, db_default=False, editable=False,
                                help_text="run inside the manager's pass, with no agent and no message")
    state = models.CharField(max_length=20, choices=OperationState.choices, default=OperationState.PENDING, editable=False)
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True, help_text='{"type", "message", "traceback"}')
    attempt = models.PositiveIntegerField(default=0, editable=False)
    current_retries = models.PositiveIntegerField(default=0)
    max_retries = models.IntegerField(default=3, help_text="-1: retry without limit")
    retry_interval = models.FloatField(default=5, help_text="seconds")
    retry_backoff = models.FloatField(default=1, help_text="each retry waits retry_interval * retry_backoff ** retries")
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    timeout = models.FloatField(null=True, blank=True, help_text="seconds per attempt; none: no limit")
    # Fan-in counted in the database: how many dependencies have not succeeded yet.
    pending_dependencies = models.PositiveIntegerField(default=0)
    depends_on = models.ManyToManyField(
        "self", through="workflows_app.OperationDependency", symmetrical=False, related_name="dependents", blank=True
    )
    # Where the first positional argument comes from at send time (canvas chain passing):
    # {"result": name} or {"list": [...]} (workflows_app.engine.graph.Input).
    input = models.JSONField(null=True, blank=True)
    # Whether the workflow function waits on this step by itself (ctx.execute); graph and canvas
    # steps wake it only when their graph can make no more progress.
    awaited = models.BooleanField(default=True)
    # The steps the workflow code had awaited last when it asked for this one (names): the order
    # of imperative code, drawn as arrows. Never a dependency: nothing counts, blocks on or
    # resumes by it (OperationDependency is what a step waits for).
    after = models.JSONField(default=list, blank=True, editable=False)
    # A failure the workflow code was shown (a wait raised StepFailed for it) and went on past:
    # it no longer stops new calls in no_new_calls / fail_fast. Stays failed.
    failure_handled = models.BooleanField(default=False)
    # The run of the agent that started the current attempt.
    incarnation = models.CharField(max_length=64, blank=True, default="")
    # One timestamp per state: when the operation last entered it.
    # Its operation's limits (workflows_app.flow): the keys it counts against ("" for none), set
    # when it is stored, and what it waits for while a limit holds it back.
    # A database default too: a process of the version before writes rows without them.
    rate_key = models.CharField(max_length=255, blank=True, default="", db_default="", editable=False)
    concurrency_key = models.CharField(max_length=255, blank=True, default="", db_default="", editable=False)
    flow_wait = models.CharField(max_length=20, choices=FlowWait.choices, blank=True, default="", db_default="",
                                 editable=False,
                                 help_text="what it waits for before it may be sent: a limit of its operation")
    pending_at = models.DateTimeField(default=clock.now, editable=False)  # the engine's clock (workflows_app.clock)
    sending_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # Until when the message of the current attempt may start it on its agent without asking
    # (GRANT_SECONDS after it was sent); None once the attempt started, ended or its agent
    # answered that it will never start it. Nothing supersedes an attempt whose grant runs.
    granted_until = models.DateTimeField(null=True, blank=True, editable=False)
    rescheduled_at = models.DateTimeField(null=True, blank=True)
    succeeded_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    objects = OperationQuerySet.as_manager()

    class Meta:
        ordering = ["pending_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["execution", "name"], name="operation_name_unique_in_execution"),
            models.CheckConstraint(condition=models.Q(state__in=OperationState.values), name="operation_state_valid"),
        ]
        # Every change of state writes a new row version to each index whose row it is in, so
        # the indexes that only the tick's and the agents' look-ups use hold only the operations
        # those look for: in flight or waiting for a retry; started (by agent).
        indexes = [
            models.Index(fields=["execution", "state"], name="operation_execution_state"),
            models.Index(fields=["state", "next_attempt_at"], name="operation_in_flight_state",
                         condition=models.Q(state__in=OPERATION_IN_FLIGHT_OR_WAITING)),
            models.Index(fields=["agent"], name="operation_started_agent", condition=models.Q(state=OperationState.STARTED)),
            # The tick's look for children that ended without waking their parent.
            models.Index(fields=["execution"], name="operation_child_started",
                         condition=models.Q(state=OperationState.STARTED, kind=StepKind.WORKFLOW)),
            # The limits of operations (workflows_app.flow): the slots a key's attempts hold, and
            # the steps that wait, in the order they were asked for.
            models.Index(fields=["concurrency_key", "state"], name="operation_concurrency_slot",
                         condition=models.Q(state__in=OPERATION_HOLDING_SLOT) & ~models.Q(concurrency_key="")),
            models.Index(fields=["operation", "pending_at", "id"], name="operation_flow_waiting",
                         condition=~models.Q(flow_wait="")),
            models.Index(fields=["operation", "pending_at", "id"], name="operation_flow_handed_over",
                         condition=models.Q(flow_wait=FlowWait.QUEUED)),
        ]

    def __str__(self):
        return f"{self.name} [{self.operation}] ({self.state}, attempt {self.attempt})"

    @property
    def task_id(self) -> str:
        """The Celery task id of the current attempt."""
        return task_id_for(self.id, self.attempt)

    @property
    def is_terminal(self) -> bool:
        return self.state in OPERATION_TERMINAL


def task_id_for(operation_id, attempt) -> str:
    return f"{operation_id}.{attempt}"


class OperationDependency(models.Model):
    """``operation`` may start only after ``depends_on`` succeeded (an edge of the graph)."""

    operation = models.ForeignKey(Operation, on_delete=models.CASCADE, related_name="+")
    depends_on = models.ForeignKey(Operation, on_delete=models.CASCADE, related_name="+")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["operation", "depends_on"], name="operation_dependency_unique"),
            models.CheckConstraint(condition=~models.Q(operation=models.F("depends_on")), name="operation_dependency_not_self"),
        ]
        indexes = [models.Index(fields=["depends_on"], name="operation_dependency_reverse")]

    def __str__(self):
        return f"{self.depends_on_id} -> {self.operation_id}"
