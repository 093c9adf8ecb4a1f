"""The admin's read-only records: operations and the event log (nothing here edits a
state or the log, and nothing adds them by hand). They are part of their execution: whoever may
view executions reads them, those of the executions it may view (``workflows_app.permissions``),
whatever Django's own view_operation and view_event say."""

from django.contrib import admin
from django.utils.html import format_html

from workflows_app import permissions
from workflows_app.admin import display
from workflows_app.models import Event, Operation


class ReadOnlyAdmin(admin.ModelAdmin):
    """Viewed and searched, never added, changed or deleted here (they go with their execution)."""

    class Media:
        css = {"all": ["workflows_app/admin.css"]}

    def get_queryset(self, request):
        return permissions.visible_records(request.user, super().get_queryset(request))

    def has_view_permission(self, request, obj=None):
        return permissions.allows(request.user, "view")

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Operation)
class OperationAdmin(ReadOnlyAdmin):
    list_display = ["name", "operation", "execution_link", "agent", "local", "state_badge", "attempt", "started"]
    list_filter = ["state", "local", "agent"]
    search_fields = ["name", "operation", "=execution__id"]
    list_select_related = ["execution"]
    fields = ["execution", "name", "operation", "agent", "local", "state_badge", "attempt", "current_retries",
              "max_retries", "args_json", "kwargs_json", "result_json", "error_text", "flower_link", "incarnation",
              "pending", "sent", "started", "succeeded", "failed", "cancelled"]
    readonly_fields = fields

    @admin.display(description="execution", ordering="execution")
    def execution_link(self, operation):
        return display.execution_link(operation.execution)

    started = display.moment_column("started_at", "started", ordering=True)
    pending = display.moment_column("pending_at", "pending at")
    sent = display.moment_column("sent_at", "sent at")
    succeeded = display.moment_column("succeeded_at", "succeeded at")
    failed = display.moment_column("failed_at", "failed at")
    cancelled = display.moment_column("cancelled_at", "cancelled at")

    @admin.display(description="state", ordering="state")
    def state_badge(self, operation):
        return display.badge(operation.state)

    @admin.display(description="args")
    def args_json(self, operation):
        return _pre(display.pretty_json(operation.args))

    @admin.display(description="kwargs")
    def kwargs_json(self, operation):
        return _pre(display.pretty_json(operation.kwargs))

    @admin.display(description="result")
    def result_json(self, operation):
        return _pre(display.pretty_json(operation.result))

    @admin.display(description="error")
    def error_text(self, operation):
        if not operation.error:
            return "—"
        error = dict(operation.error)
        traceback = error.pop("traceback", "")
        return format_html("{}{}", _pre(display.pretty_json(error)), _pre(traceback) if traceback else "")

    @admin.display(description="Flower")
    def flower_link(self, operation):
        # A local step is no Celery task: its pass ran it, with no message.
        url = display.flower_task_url(operation.task_id) if operation.attempt and not operation.local else None
        return format_html('<a href="{}">task {}</a>', url, operation.task_id) if url else "—"


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["id", "time", "execution_link", "operation", "type", "message"]
    list_filter = ["type"]
    search_fields = ["=execution__id", "operation", "message"]
    list_select_related = ["execution"]
    ordering = ["-id"]
    fields = ["id", "execution", "operation", "type", "message", "data_json", "time"]
    readonly_fields = fields

    time = display.moment_column("timestamp", "time", ordering=True)

    @admin.display(description="execution", ordering="execution")
    def execution_link(self, event):
        return display.execution_link(event.execution)

    @admin.display(description="data")
    def data_json(self, event):
        return _pre(display.pretty_json(event.data))

    def lookup_allowed(self, lookup, value, request=None):
        return lookup == "execution__id__exact" or super().lookup_allowed(lookup, value, request)


def _pre(text):
    return format_html('<pre class="sy-pre">{}</pre>', text)
