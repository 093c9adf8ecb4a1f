from datetime import timedelta

from django.db import models
from django.db.models import Case, Count, OuterRef, Subquery, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from workflows_app.conf import workflows_settings
from workflows_app.models import Operation
from workflows_app.states import OperationState


class AgentStatus(models.TextChoices):
    ONLINE = "online"
    OFFLINE = "offline"


class AgentQuerySet(models.QuerySet):
    def online_threshold(self):
        return timezone.now() - timedelta(seconds=workflows_settings.AGENT_OFFLINE_AFTER_SECONDS)

    def online(self):
        return self.filter(last_heartbeat__gte=self.online_threshold())

    def offline(self):
        return self.exclude(last_heartbeat__gte=self.online_threshold())

    def with_status(self):
        """Annotate ``live_status`` (online/offline, from the last heartbeat) and ``running``
        (operations started on the agent's queue), in the one query of the list."""
        running = (
            Operation.objects.filter(agent=OuterRef("name"), state=OperationState.STARTED)
            .order_by()
            .values("agent")
            .annotate(count=Count("id"))
            .values("count")
        )
        return self.annotate(
            live_status=Case(
                When(last_heartbeat__gte=self.online_threshold(), then=Value(AgentStatus.ONLINE.value)),
                default=Value(AgentStatus.OFFLINE.value),
                output_field=models.CharField(),
            ),
            running=Coalesce(Subquery(running, output_field=models.IntegerField()), 0),
        )


class Agent(models.Model):
    """A named agent (a queue) and the run of it that last reported.

    Online or offline is not stored: it follows from ``last_heartbeat`` and
    ``WORKFLOWS["AGENT_OFFLINE_AFTER_SECONDS"]``, so it never needs a writer to flip it.
    """

    name = models.CharField(max_length=200, unique=True, help_text="the queue it consumes")
    incarnation = models.CharField(max_length=64, blank=True, default="", help_text="id of the current run")
    hostname = models.CharField(max_length=255, blank=True, default="")
    pid = models.IntegerField(null=True, blank=True)
    concurrency = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True, db_index=True)

    objects = AgentQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    @property
    def status(self) -> AgentStatus:
        if self.last_heartbeat is None:
            return AgentStatus.OFFLINE
        threshold = timezone.now() - timedelta(seconds=workflows_settings.AGENT_OFFLINE_AFTER_SECONDS)
        return AgentStatus.ONLINE if self.last_heartbeat >= threshold else AgentStatus.OFFLINE


def hosts(names) -> dict:
    """The host name each agent of ``names`` that has a row last registered or heart-beat from (its
    Celery worker is ``<name>@<host>``); empty when no report of it said yet."""
    return dict(Agent.objects.filter(name__in=names).values_list("name", "hostname"))
