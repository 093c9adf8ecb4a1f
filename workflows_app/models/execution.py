import hashlib
import secrets
import uuid

from django.db import models

from workflows_app import clock
from workflows_app.states import EXECUTION_ACTIVE, EXECUTION_TERMINAL, ExecutionStatus, FailureMode
from workflows_app.tracing.context import reserve as new_trace_context


def hash_token(token: str) -> str:
    """The stored form of an execution token (a token itself is never stored)."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(32)


class ExecutionQuerySet(models.QuerySet):
    def active(self):
        return self.filter(status__in=EXECUTION_ACTIVE)

    def terminal(self):
        return self.filter(status__in=EXECUTION_TERMINAL)


class Execution(models.Model):
    """One run of a workflow (Cloudify's execution). ``status`` changes only through
    :mod:`workflows_app.transitions`."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workflow_id = models.CharField(max_length=200)
    deployment_id = models.CharField(max_length=200, null=True, blank=True)
    parameters = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=20, choices=ExecutionStatus.choices, default=ExecutionStatus.PENDING, editable=False)
    failure_mode = models.CharField(max_length=30, choices=FailureMode.choices, default=FailureMode.NO_NEW_CALLS)
    timeout = models.FloatField(null=True, blank=True, help_text="seconds; none: no limit")
    wait_after_fail = models.FloatField(default=600, help_text="seconds")
    payload = models.JSONField(default=dict, blank=True, help_text="the durable workflow data")
    error = models.TextField(blank=True, default="")
    is_dry_run = models.BooleanField(default=False)
    created_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(default=clock.now, editable=False)  # the engine's clock (workflows_app.clock)
    started_at = models.DateTimeField(null=True, blank=True, editable=False)
    ended_at = models.DateTimeField(null=True, blank=True, editable=False)
    # sha256 of the current token; a dispatcher must present the token itself.
    token_hash = models.CharField(max_length=64, blank=True, default="", editable=False)
    # How many passes the dispatcher made (engine.dispatcher): a live run another process keeps
    # of the workflow function (engine.live) knows from it that it was overtaken.
    passes = models.PositiveBigIntegerField(default=0, db_default=0, editable=False)
    # A child execution: the execution that started it, and the name of the step of
    # that execution which follows it. A child goes with its parent when the parent is deleted.
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="children",
                               editable=False)
    parent_step = models.CharField(max_length=255, blank=True, default="", db_default="", editable=False)
    # ``ctx.patched(change_id)``'s answers, stored the first time each change id is asked
    # (change id -> true or false), so that every later run of the function gets the same one
    # (engine.patches).
    patches = models.JSONField(default=dict, blank=True, editable=False)
    # A rerun (engine.reruns): the execution it runs again, and the step it runs again from.
    rerun_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reruns",
                                 editable=False)
    rerun_from = models.CharField(max_length=255, blank=True, default="", db_default="", editable=False)
    # A schedule's run: the schedule that started it and the slot it is for (engine.schedules).
    schedule = models.ForeignKey("workflows_app.Schedule", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="executions", editable=False)
    scheduled_for = models.DateTimeField(null=True, blank=True, editable=False)
    # The concurrency key it counts against (engine.concurrency); empty: none of its workflow's.
    concurrency_key = models.CharField(max_length=255, blank=True, default="", db_default="", editable=False)
    # Started with ``force`` beside its deployment's active execution: it never waits for that
    # deployment, even while it waits for its workflow's limit (engine.concurrency).
    forced = models.BooleanField(default=False, db_default=False, editable=False)
    # A deferred start: it stays pending until then, when a manager's tick starts it (a stored
    # time, not a broker countdown). None: at once.
    run_after = models.DateTimeField(null=True, blank=True, editable=False)
    # Its operations' messages go ahead of those of a lower priority waiting in the same agent
    # queue (workflows_app.broker.message_priority): -100 to 100, Django's Tasks' scale.
    priority = models.SmallIntegerField(default=0, db_default=0, editable=False)
    # Its OpenTelemetry trace: its span's ids, chosen when it is created under the span current
    # then, its span recorded when it ends (workflows_app.tracing); "" when not traced.
    trace_context = models.CharField(max_length=80, blank=True, default=new_trace_context, db_default="",
                                     editable=False)

    objects = ExecutionQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["status", "-created_at"], name="execution_status_created"),
            models.Index(fields=["-created_at"], name="execution_created"),
            models.Index(fields=["workflow_id", "-created_at"], name="execution_workflow_created"),
            models.Index(fields=["deployment_id", "status", "created_at"], name="execution_deployment_status"),
            models.Index(fields=["concurrency_key", "status", "created_at"], name="execution_concurrency",
                         condition=~models.Q(concurrency_key="")),
            models.Index(fields=["schedule", "-created_at"], name="execution_schedule_created"),
            # The list's other orderings (ordering=started_at, ended_at, either way): without them a
            # page of GET /executions sorts every row of the table.
            models.Index(fields=["started_at"], name="execution_started_at"),
            models.Index(fields=["ended_at"], name="execution_ended_at"),
            # The tick's: started executions with a timeout (not every started one), and the
            # started ones in the order the sweep for lost wake-ups pages through them.
            models.Index(fields=["started_at"], name="execution_started_timeout",
                         condition=models.Q(status=ExecutionStatus.STARTED, timeout__isnull=False)),
            models.Index(fields=["id"], name="execution_started", condition=models.Q(status=ExecutionStatus.STARTED)),
            # The tick's deferred starts: the pending executions that wait for their run_after.
            models.Index(fields=["run_after"], name="execution_deferred",
                         condition=models.Q(status=ExecutionStatus.PENDING, run_after__isnull=False)),
        ]
        permissions = [("force_execution", "Can kill, force-cancel and force-resume executions")]
        constraints = [
            models.CheckConstraint(condition=models.Q(status__in=ExecutionStatus.values), name="execution_status_valid"),
            models.CheckConstraint(condition=models.Q(failure_mode__in=FailureMode.values), name="execution_failure_mode_valid"),
            models.UniqueConstraint(fields=["schedule", "scheduled_for"], name="execution_schedule_slot_once",
                                    condition=models.Q(schedule__isnull=False)),
            models.CheckConstraint(condition=models.Q(priority__gte=-100, priority__lte=100),
                                   name="execution_priority_range"),
        ]

    def __str__(self):
        return f"{self.workflow_id} {self.id} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in EXECUTION_TERMINAL

    def deferred(self, now) -> bool:
        """Whether its start is deferred past ``now`` (``run_after``)."""
        return self.run_after is not None and self.run_after > now

    def token_matches(self, token: str) -> bool:
        return bool(self.token_hash) and secrets.compare_digest(self.token_hash, hash_token(token))
