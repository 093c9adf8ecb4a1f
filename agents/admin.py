"""The agents in Django admin: online or offline, the age of the last heartbeat, the
host, the operations running on each, and a link to the worker in Flower when FLOWER_URL is set.
Agents register themselves when they start: nothing here adds or edits one. Whoever may view
executions sees them (``workflows_app.permissions``), as in the API."""

from django.contrib import admin
from django.utils.html import format_html

from agents.models import Agent
from workflows_app import permissions
from workflows_app.admin import display


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["name", "status_badge", "heartbeat", "hostname", "running_operations", "concurrency", "started",
                    "flower"]
    search_fields = ["name", "hostname"]
    readonly_fields = ["name", "status_badge", "heartbeat", "hostname", "running_operations", "flower", "incarnation",
                       "pid", "concurrency", "started", "last_heartbeat_at"]
    fields = readonly_fields

    class Media:
        css = {"all": ["workflows_app/admin.css"]}

    def get_queryset(self, request):
        return super().get_queryset(request).with_status()  # status and running in the list's one query

    @admin.display(description="status", ordering="last_heartbeat")
    def status_badge(self, agent):
        return display.badge(agent.live_status)

    @admin.display(description="last heartbeat", ordering="last_heartbeat")
    def heartbeat(self, agent):
        return format_html('<span title="{}">{}</span>', display.moment(agent.last_heartbeat),
                           display.age(agent.last_heartbeat))

    started = display.moment_column("started_at", "started at", ordering=True)
    last_heartbeat_at = display.moment_column("last_heartbeat", "last heartbeat at")

    @admin.display(description="running", ordering="running")
    def running_operations(self, agent):
        return agent.running

    @admin.display(description="Flower")
    def flower(self, agent):
        url = display.flower_worker_url(f"{agent.name}@{agent.hostname}") if agent.hostname else None
        return format_html('<a href="{}" target="_blank" rel="noopener">worker</a>', url) if url else "—"

    def has_module_permission(self, request):
        # Django's asks for a permission of the agents app, which a viewer of executions lacks.
        return permissions.allows(request.user, "view") or super().has_module_permission(request)

    def has_view_permission(self, request, obj=None):
        return permissions.allows(request.user, "view")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
