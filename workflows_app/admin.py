"""Django admin: executions with their operations and events. Status and state are read-only
here: they change only through the services (the actions below) and the engine's transitions."""

from django.contrib import admin, messages

from workflows_app import services
from workflows_app.errors import ActionRefused
from workflows_app.models import Event, Execution, Operation


def _action(service, label, description, permissions=None):
    """An admin action that calls ``service`` for each selected execution and says how each went."""

    def run(modeladmin, request, queryset):
        done = 0
        for pk in queryset.values_list("pk", flat=True):
            try:
                service(pk)
                done += 1
            except (ActionRefused, Execution.DoesNotExist) as refused:
                modeladmin.message_user(request, str(refused), messages.WARNING)
        if done:
            modeladmin.message_user(request, f"{label}: {done} execution(s)", messages.SUCCESS)

    run.__name__ = f"{service.__name__}_selected"
    return admin.action(description=description, permissions=permissions)(run)


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
    actions = [
        _action(services.cancel, "cancel", "Cancel: stop starting operations, await the running ones"),
        _action(services.force_cancel, "force-cancel", "Force-cancel: end now, without waiting", ["force"]),
        _action(services.kill, "kill", "Kill: signal the processes of running operations", ["force"]),
        _action(services.resume, "resume", "Resume: run failed and cancelled operations again, with a new token"),
        _action(services.force_resume, "force-resume", "Force-resume: also reset operations left in flight", ["force"]),
    ]

    def has_force_permission(self, request):
        return request.user.has_perm("workflows_app.force_execution")


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
