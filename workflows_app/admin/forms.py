"""The admin's form to start an execution: what ``POST /api/v1/executions`` takes, checked the
same way (``services.start`` checks the workflow and its parameters)."""

from django import forms

from workflows_app.registry import workflows
from workflows_app.states import FailureMode

#: What to do when the deployment already has an active execution (SPEC §4).
IF_BUSY = [("refuse", "refuse to start"), ("queue", "queue behind it"), ("force", "run beside it")]


class StartExecutionForm(forms.Form):
    workflow = forms.ChoiceField(help_text="a registered workflow")
    parameters = forms.JSONField(
        initial=dict, required=False, widget=forms.Textarea(attrs={"rows": 6, "cols": 60, "class": "vLargeTextField"}),
        help_text='a JSON object, e.g. {"vm_count": 3}; the workflows below list theirs')
    deployment_id = forms.CharField(required=False, max_length=200,
                                    help_text="optional: one active execution per deployment")
    if_busy = forms.ChoiceField(choices=IF_BUSY, initial="refuse", label="If the deployment is busy")
    failure_mode = forms.ChoiceField(choices=[("", "the workflow's own")] + FailureMode.choices, required=False)
    dry_run = forms.BooleanField(required=False, help_text="record the operations without running them")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["workflow"].choices = [(name, name) for name in sorted(workflows())]

    def clean_parameters(self):
        parameters = self.cleaned_data["parameters"]
        if parameters in (None, ""):
            return {}
        if not isinstance(parameters, dict):
            raise forms.ValidationError("parameters must be a JSON object")
        return parameters

    def start_arguments(self) -> dict:
        """The keyword arguments of ``services.start`` the form's data gives."""
        data = self.cleaned_data
        return {
            "parameters": data["parameters"],
            "deployment_id": data["deployment_id"] or None,
            "failure_mode": data["failure_mode"] or None,
            "dry_run": data["dry_run"],
            "queue": data["if_busy"] == "queue",
            "force": data["if_busy"] == "force",
        }
