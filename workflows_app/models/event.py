from django.db import models

from workflows_app import clock
from workflows_app.states import EventType


class Event(models.Model):
    """One entry of an execution's log, in order (``id`` increases). A state change and its
    event are written in one transaction (``workflows_app.transitions``)."""

    id = models.BigAutoField(primary_key=True)
    # No index of its own: event_execution_id starts with it.
    execution = models.ForeignKey("workflows_app.Execution", on_delete=models.CASCADE, related_name="events", db_index=False)
    operation = models.CharField(max_length=255, null=True, blank=True, help_text="the step name, or none")
    type = models.CharField(max_length=30, choices=EventType.choices)
    message = models.TextField(blank=True, default="")
    data = models.JSONField(default=dict, blank=True)
    timestamp = models.DateTimeField(default=clock.now, editable=False)  # the engine's clock (workflows_app.clock)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["execution", "id"], name="event_execution_id"),
            models.Index(fields=["type", "id"], name="event_type_id"),
            # A wait's look-up of the events delivered to its execution (engine.waits): with only
            # event_execution_id and event_type_id, a planner that has not yet seen many
            # event_received rows walks all of them, and every wake-up costs more than the last.
            models.Index(fields=["execution", "id"], name="event_received_execution",
                         condition=models.Q(type=EventType.EVENT_RECEIVED)),
        ]

    def __str__(self):
        return f"#{self.id} {self.type} {self.operation or ''}".rstrip()
