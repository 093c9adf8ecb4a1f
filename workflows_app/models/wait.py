from django.db import models

from workflows_app import clock
from workflows_app.states import WaitKind, WaitOutcome


class Wait(models.Model):
    """One wait of a workflow for an external event or a timer (``ctx.await_event``,
    ``ctx.wait_for_event``, ``ctx.sleep``), or the backoff before the next try of a workflow
    whose code raised (``@workflow(on_unhandled="retry")``, ``retry#<n>``).

    A waiting workflow holds no thread or process: this row is all there is of it. ``key`` names
    the wait the same way on every replay (the k-th wait for an event name, the k-th sleep), so
    a replay finds the row a previous one stored, and an outcome once stored is the outcome.
    Waits are not operations: they have no agent, no attempt and no task events.
    """

    id = models.BigAutoField(primary_key=True)
    execution = models.ForeignKey("workflows_app.Execution", on_delete=models.CASCADE, related_name="waits")
    key = models.CharField(max_length=300, help_text="event:<name>#<k>, sleep#<k> (the same on every replay) or retry#<n>")
    kind = models.CharField(max_length=10, choices=WaitKind.choices)
    name = models.CharField(max_length=255, blank=True, default="", help_text="the event name; empty for a sleep")
    timeout = models.FloatField(null=True, blank=True, help_text="seconds, as the workflow asked; none: no limit")
    deadline = models.DateTimeField(null=True, blank=True, help_text="when a sleep ends or an event wait times out")
    outcome = models.CharField(max_length=20, choices=WaitOutcome.choices, default=WaitOutcome.WAITING)
    payload = models.JSONField(null=True, blank=True, help_text="the payload of the event it took")
    # The event_received event it took: each event is taken by one wait at most.
    event = models.OneToOneField("workflows_app.Event", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="taken_by")
    # The steps the workflow code had awaited last when it first reached the wait (as an
    # operation's ``after``): what a rerun reads to tell whether the wait followed a step.
    after = models.JSONField(default=list, blank=True, editable=False)
    created_at = models.DateTimeField(default=clock.now, editable=False)  # the engine's clock (workflows_app.clock)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["execution", "key"], name="wait_key_unique_in_execution"),
            models.CheckConstraint(condition=models.Q(kind__in=WaitKind.values), name="wait_kind_valid"),
            models.CheckConstraint(condition=models.Q(outcome__in=WaitOutcome.values), name="wait_outcome_valid"),
        ]
        indexes = [
            # The tick's query: open waits whose deadline passed.
            models.Index(fields=["deadline"], name="wait_open_deadline",
                         condition=models.Q(outcome=WaitOutcome.WAITING, deadline__isnull=False)),
            models.Index(fields=["execution", "outcome"], name="wait_execution_outcome"),
        ]

    def __str__(self):
        return f"{self.key} ({self.outcome})"
