"""The admin's "Paused workflows": the workflows paused as a whole. Adding one pauses a workflow;
the list's action unpauses the checked ones. Both go through the services
(``services.pause_workflow``, ``services.unpause_workflow``), which check the permission
(``change_execution``, and the workflow's own) and refuse what the state does not allow."""

from django import forms
from django.contrib import admin, messages

from workflows_app import permissions, services
from workflows_app.errors import PermissionRefused, RegistrationError, TransitionRefused
from workflows_app.models import PausedWorkflow
from workflows_app.registry import workflows


class PauseWorkflowForm(forms.ModelForm):
    """Which workflow to pause: a registered one the user may see and that is not paused."""

    workflow_id = forms.ChoiceField(label="Workflow", help_text=(
        "its new executions wait queued and its schedules' slots are skipped until it is unpaused; "
        "its running executions go on"))

    class Meta:
        model = PausedWorkflow
        fields = ["workflow_id"]

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        hidden = set(permissions.hidden_workflows(user))
        paused = set(PausedWorkflow.objects.values_list("workflow_id", flat=True))
        self.fields["workflow_id"].choices = [(name, name) for name in sorted(workflows())
                                              if name not in hidden | paused]
        self.user = user

    def validate_unique(self):
        pass  # the service says when it is paused already

    def clean(self):
        cleaned = super().clean()
        workflow_id = cleaned.get("workflow_id")
        if workflow_id:
            try:
                services.pause_workflow(workflow_id, user=self.user)
            except (PermissionRefused, RegistrationError, TransitionRefused) as refused:
                raise forms.ValidationError(str(refused)) from None
        return cleaned


@admin.action(description="Unpause the selected workflows", permissions=["unpause"])
def unpause_selected(modeladmin, request, queryset):
    for workflow_id in queryset.values_list("workflow_id", flat=True):
        try:
            started = services.unpause_workflow(workflow_id, user=request.user)
        except (PermissionRefused, RegistrationError, TransitionRefused) as refused:
            modeladmin.message_user(request, f"unpause refused: {refused}", messages.ERROR)
        else:
            modeladmin.message_user(request, f"{workflow_id} unpaused: {started} queued execution(s) started",
                                    messages.SUCCESS)


@admin.register(PausedWorkflow)
class PausedWorkflowAdmin(admin.ModelAdmin):
    list_display = ("workflow_id", "paused_at", "paused_by")
    actions = [unpause_selected]
    form = PauseWorkflowForm

    def get_form(self, request, obj=None, **kwargs):
        form = super().get_form(request, obj, **kwargs)

        class WithUser(form):
            def __init__(self, *args, **inner):
                super().__init__(*args, user=request.user, **inner)

        return WithUser

    def get_queryset(self, request):
        return super().get_queryset(request).exclude(workflow_id__in=permissions.hidden_workflows(request.user))

    def save_model(self, request, obj, form, change):
        pass  # the form's clean paused it, through the service

    def has_view_permission(self, request, obj=None):
        return permissions.allows(request.user, "view")

    def has_add_permission(self, request):
        return permissions.allows(request.user, "pause")

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_unpause_permission(self, request):
        return permissions.allows(request.user, "unpause")

    def has_module_permission(self, request):
        return self.has_view_permission(request)
