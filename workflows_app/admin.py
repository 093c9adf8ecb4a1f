"""Django admin: executions with their operations and events. Status and state are read-only
here: they change only through the engine's transitions (actions arrive with the services)."""

from django.contrib import admin

from workflows_app.models import Event, Execution, Operation


class OperationInline(admin.TabularInline):
    model = Operation
    fields = ["name", "operation", "agent", "state", "attempt", "current_retries", "started_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Execution)
class ExecutionAdmin(admin.ModelAdmin):
    list_display = ["id", "workflow_id", "deployment_id", "status", "created_at", "started_at", "ended_at"]
    list_filter = ["status", "workflow_id", "failure_mode", "is_dry_run"]
    search_fields = ["id", "workflow_id", "deployment_id", "created_by"]
    date_hierarchy = "created_at"
    readonly_fields = ["id", "status", "created_at", "started_at", "ended_at", "error", "payload"]
    exclude = ["token_hash"]
    inlines = [OperationInline]


@admin.register(Operation)
class OperationAdmin(admin.ModelAdmin):
    list_display = ["name", "operation", "execution", "agent", "state", "attempt", "pending_at"]
    list_filter = ["state", "agent"]
    search_fields = ["name", "operation", "execution__id"]
    list_select_related = ["execution"]
    raw_id_fields = ["execution"]
    readonly_fields = ["id", "state", "attempt", "result", "error", "incarnation", "pending_dependencies",
                       "pending_at", "sending_at", "sent_at", "started_at", "rescheduled_at",
                       "succeeded_at", "failed_at", "cancelled_at"]


@admin.register(Event)
class EventAdmin(admin.ModelAdmin):
    list_display = ["id", "execution", "operation", "type", "message", "timestamp"]
    list_filter = ["type"]
    search_fields = ["execution__id", "operation", "message"]
    list_select_related = ["execution"]
    raw_id_fields = ["execution"]

    def has_change_permission(self, request, obj=None):
        return False  # the log is append-only
