from django.contrib import admin

from agents.models import Agent


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["name", "agent_status", "hostname", "last_heartbeat", "incarnation"]
    search_fields = ["name", "hostname"]
    readonly_fields = ["name", "incarnation", "hostname", "pid", "concurrency", "started_at", "last_heartbeat"]

    @admin.display(description="status")
    def agent_status(self, obj):
        return obj.status

    def has_add_permission(self, request):
        return False  # agents register themselves when they start
