"""The admin's form to start an execution: what ``POST /api/v1/executions`` takes, checked the
same way (``services.start`` checks the workflow and its parameters)."""

import json

from django import forms
from django.forms.fields import InvalidJSONInput

from workflows_app import values
from workflows_app.errors import ValueRefused
from workflows_app.registry import workflows
from workflows_app.states import FailureMode

#: What to do when the deployment already has an active execution.
IF_BUSY = [("refuse", "refuse to start"), ("queue", "queue behind it"), ("force", "run beside it")]


class CheckedJSONField(forms.JSONField):
    """Django's JSONField, reading JSON as the API does (``values.loads``: no NaN, no nesting past
    the recursion limit) and showing back any input, even one that cannot be encoded as a page
    (a lone surrogate, a NUL), as text that can. The value goes through ``values.check``."""

    def to_python(self, value):
        if self.disabled or value in self.empty_values:
            return None
        if isinstance(value, (list, dict, int, float, InvalidJSONInput)):
            return value
        try:
            parsed = values.loads(value)
        except ValueError as exc:
            raise forms.ValidationError(f"not JSON: {values.clean_text(exc, 200)}", code="invalid") from None
        try:
            return values.check(parsed, self.label or "the value")
        except ValueRefused as refused:
            raise forms.ValidationError(str(refused), code="invalid") from None

    def bound_data(self, data, initial):
        if self.disabled:
            return initial
        if data is None:
            return None
        try:
            return values.loads(data)
        except ValueError:
            return InvalidJSONInput(data)

    def prepare_value(self, value):
        if isinstance(value, InvalidJSONInput):
            return values.clean_text(value)
        text = json.dumps(value, ensure_ascii=False, default=str)
        return text if values.string_problem(text) is None else json.dumps(value, default=str)


class StartExecutionForm(forms.Form):
    workflow = forms.ChoiceField(help_text="a registered workflow")
    parameters = CheckedJSONField(label="parameters",
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
