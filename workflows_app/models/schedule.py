import uuid

from django.db import models

from workflows_app import clock
from workflows_app.states import OverlapPolicy, SlotOutcome


class Schedule(models.Model):
    """Starts executions of ``workflow_id`` with ``parameters`` on a cron expression (in
    ``timezone``) or every ``interval`` seconds. The managers fire it (``engine.schedules``):
    each slot is stored (``ScheduleSlot``), so it is started once however many managers run."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    workflow_id = models.CharField(max_length=200)
    parameters = models.JSONField(default=dict, blank=True)
    cron = models.CharField(max_length=255, blank=True, default="", help_text="a cron expression; or an interval")
    interval = models.PositiveIntegerField(null=True, blank=True, help_text="seconds; or a cron expression")
    timezone = models.CharField(max_length=64, default="UTC", help_text="the IANA time zone the cron expression reads in")
    overlap = models.CharField(max_length=20, choices=OverlapPolicy.choices, default=OverlapPolicy.SKIP)
    catchup_window = models.PositiveIntegerField(default=0, help_text="seconds: how late a missed slot may still start")
    jitter = models.PositiveIntegerField(default=0, help_text="seconds: each start is delayed by up to this much")
    paused = models.BooleanField(default=False)
    # The next slot to fire (its jitter not added), kept by engine.schedules; none while paused.
    next_run_at = models.DateTimeField(null=True, blank=True, editable=False)
    # The slot of the last execution it started.
    last_run_at = models.DateTimeField(null=True, blank=True, editable=False)
    # buffer_one: the slot that waits for the active execution to end (none: no slot waits).
    buffered_slot = models.DateTimeField(null=True, blank=True, editable=False)
    created_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(default=clock.now, editable=False)  # the engine's clock (workflows_app.clock)
    updated_at = models.DateTimeField(default=clock.now, editable=False)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # The managers' look for what is due.
            models.Index(fields=["next_run_at"], name="schedule_due", condition=models.Q(paused=False)),
            models.Index(fields=["workflow_id", "-created_at"], name="schedule_workflow_created"),
        ]
        constraints = [
            models.CheckConstraint(condition=models.Q(overlap__in=OverlapPolicy.values), name="schedule_overlap_valid"),
            models.CheckConstraint(
                condition=(models.Q(cron="", interval__gte=1) | (~models.Q(cron="") & models.Q(interval__isnull=True))),
                name="schedule_cron_or_interval"),
        ]

    def __str__(self):
        return f"{self.workflow_id} {self.cron or f'every {self.interval}s'} ({self.id})"


class ScheduleSlot(models.Model):
    """One slot of a schedule and what became of it: ``started`` (its execution), ``buffered``
    (waiting for the active one to end), ``skipped`` (the overlap policy said so) or ``missed``
    (it fell in a downtime, outside the catch-up window). A run of missed slots is one record:
    ``slot`` the first, ``until`` the last, ``slots`` how many. Unique per schedule and slot:
    the store that makes a slot fire once."""

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="slots")
    slot = models.DateTimeField()
    outcome = models.CharField(max_length=20, choices=SlotOutcome.choices)
    execution = models.ForeignKey("workflows_app.Execution", null=True, blank=True, on_delete=models.SET_NULL,
                                  related_name="+")
    slots = models.PositiveIntegerField(default=1)
    until = models.DateTimeField(null=True, blank=True)
    reason = models.CharField(max_length=255, blank=True, default="")
    recorded_at = models.DateTimeField(default=clock.now, editable=False)  # the engine's clock (workflows_app.clock)

    class Meta:
        ordering = ["-slot"]
        constraints = [
            models.UniqueConstraint(fields=["schedule", "slot"], name="schedule_slot_once"),
            models.CheckConstraint(condition=models.Q(outcome__in=SlotOutcome.values), name="schedule_slot_outcome_valid"),
        ]

    def __str__(self):
        return f"{self.schedule_id} {self.slot.isoformat()} {self.outcome}"


class ConcurrencyKey(models.Model):
    """One row per concurrency key that has had an execution: the row an admission locks
    (``select_for_update``), so that two processes starting executions of the same key at once
    count its active executions one after the other."""

    key = models.CharField(max_length=255, primary_key=True)

    def __str__(self):
        return self.key
