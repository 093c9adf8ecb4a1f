from django.db import models
from django.utils import timezone


class PausedWorkflow(models.Model):
    """A workflow paused as a whole (``workflows_app.pausing.workflows``): while its row exists,
    its new executions wait ``queued`` and its schedules' slots are recorded ``skipped``. Its
    executions already running are not paused by it (each is paused on its own)."""

    workflow_id = models.CharField(max_length=200, primary_key=True)
    paused_at = models.DateTimeField(default=timezone.now)
    paused_by = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        default_permissions = ()  # pausing is an action on its executions: change_execution
        ordering = ["workflow_id"]

    def __str__(self):
        return f"{self.workflow_id} (paused)"

    @classmethod
    def is_paused(cls, workflow_id) -> bool:
        return cls.objects.filter(workflow_id=workflow_id).exists()
