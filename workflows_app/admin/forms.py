"""The admin's form to start an execution: what ``POST /api/v1/executions`` takes, checked the
same way (``services.start`` checks the workflow and its parameters).

Two forms in one: without a workflow chosen, any workflow and its parameters as one JSON object;
for one workflow (``definition``), a field per parameter, made from the JSON Schema of its
annotations (:func:`parameter_field`): a number field for ``int`` and ``float``, a checkbox for
``bool``, a select for a ``Literal``, a text field for ``str``, JSON for the rest. The fields turn
what is typed into JSON values; whether they fit the workflow is the start's one check."""

import json
import uuid

from django import forms
from django.forms.fields import InvalidJSONInput

from workflows_app import parameters as typed
from workflows_app import values
from workflows_app.errors import ValueRefused
from workflows_app.registry import workflows
from workflows_app.states import FailureMode

#: The name of a parameter's field: ``parameter:<name>``, apart from the form's own fields.
PARAMETER_FIELD = "parameter:"

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


def parameter_field(name, schema, required) -> forms.Field:
    """The form field of the parameter ``name`` of this JSON Schema (``workflows_app.parameters``).
    ``Optional[X]`` is X's field, which may be left blank."""
    members = [member for member in schema.get("anyOf", ()) if member != {"type": "null"}]
    nullable = "anyOf" in schema and len(members) == 1
    inner = {**members[0], **{key: value for key, value in schema.items() if key != "anyOf"}} if nullable else schema
    has_default = "default" in schema
    blank = "default " + json.dumps(schema["default"]) if has_default else "null" if nullable else ""
    options = {"label": name, "required": required and not nullable,
               "help_text": typed.describe(schema) + (f"; blank: {blank}" if blank else "")}
    if has_default:
        options["initial"] = schema["default"]
    kind = inner.get("type")
    if "enum" in inner:
        # Each choice as its text: strings as they are, when all are strings; else as JSON.
        text = str if all(isinstance(choice, str) for choice in inner["enum"]) else json.dumps
        by_text = {text(choice): choice for choice in inner["enum"]}
        if has_default:
            options["initial"] = text(schema["default"]) if schema["default"] in inner["enum"] else None
        return forms.TypedChoiceField(choices=([] if options["required"] else [("", "—")]) + [
            (key, key) for key in by_text], coerce=by_text.__getitem__, empty_value=None, **options)
    if kind == "boolean":
        if nullable:
            return forms.NullBooleanField(**{**options, "required": False})
        return forms.BooleanField(**{**options, "required": False})
    if kind == "integer":
        return forms.IntegerField(**options)
    if kind == "number":
        return forms.FloatField(**options)
    if kind == "string":
        return forms.CharField(strip=False, **options)
    if options.get("initial", "") is None:
        del options["initial"]  # blank, rather than null typed in
    return CheckedJSONField(widget=forms.Textarea(attrs={"rows": 2, "cols": 60, "class": "vLargeTextField"}),
                            **{**options, "help_text": options["help_text"] + " (as JSON)"})


class StartExecutionForm(forms.Form):
    workflow = forms.ChoiceField(help_text="a registered workflow")
    parameters = CheckedJSONField(label="Parameters",
        initial=dict, required=False, widget=forms.Textarea(attrs={"rows": 6, "cols": 60, "class": "vLargeTextField"}),
        help_text='a JSON object, e.g. {"vm_count": 3}; the workflows below list theirs')
    deployment_id = forms.CharField(required=False, max_length=200, label="Deployment",
                                    help_text="optional: one active execution per deployment")
    if_busy = forms.ChoiceField(choices=IF_BUSY, initial="refuse", label="If the deployment is busy")
    failure_mode = forms.ChoiceField(choices=[("", "the workflow's own")] + FailureMode.choices, required=False)
    dry_run = forms.BooleanField(required=False, help_text="record the operations without running them")
    # The start's idempotency key, new each time the form is shown: submitting the same page again
    # (a reload, a second click) answers the execution the first submission started.
    idempotency_key = forms.CharField(widget=forms.HiddenInput, required=False, max_length=255, strip=False)

    def __init__(self, *args, definition=None, **kwargs):
        """``definition``: the workflow (a ``WorkflowDef``) to start with a field per parameter;
        without one, any workflow, with its parameters as JSON."""
        super().__init__(*args, **kwargs)
        self.fields["idempotency_key"].initial = new_key()
        self.definition = definition
        self.fields["workflow"].choices = [(name, name) for name in sorted(workflows())]
        if definition is not None:
            self.fields["workflow"].choices = [(definition.name, definition.name)]
            self.fields["workflow"].initial = definition.name
            self.fields["workflow"].widget = forms.HiddenInput()
            schema = definition.schema
            own = {name: field for name, field in self.fields.items() if name != "parameters"}
            self.fields = {"workflow": own.pop("workflow"), **{
                PARAMETER_FIELD + name: parameter_field(name, sub, name in schema.get("required", ()))
                for name, sub in schema["properties"].items()}, **own}

    @property
    def parameters_field(self):
        """The field a refusal of the parameters is shown at: the JSON object's, else the form's."""
        return "parameters" if self.definition is None else None

    def clean_parameters(self):
        parameters = self.cleaned_data["parameters"]
        if parameters in (None, ""):
            return {}
        if not isinstance(parameters, dict):
            raise forms.ValidationError("parameters must be a JSON object")
        return parameters

    def typed_parameters(self) -> dict:
        """The parameters the fields of one workflow give: a field left blank gives nothing when
        the parameter has a default (the workflow's own is used), else null."""
        parameters = {}
        for name, sub in self.definition.schema["properties"].items():
            field = self.fields[PARAMETER_FIELD + name]
            value = self.cleaned_data[PARAMETER_FIELD + name]
            if isinstance(field, CheckedJSONField):  # null typed is not blank
                blank = self[PARAMETER_FIELD + name].data in (None, "")
            else:  # a checkbox is never blank: unchecked is false
                blank = type(field) is not forms.BooleanField and value in (None, "")
            if not blank:
                parameters[name] = value
            elif "default" not in sub:  # blank is refused where null is not taken: a required field
                parameters[name] = None
        return parameters

    def start_arguments(self) -> dict:
        """The keyword arguments of ``services.start`` the form's data gives."""
        data = self.cleaned_data
        return {
            "parameters": data["parameters"] if self.definition is None else self.typed_parameters(),
            "deployment_id": data["deployment_id"] or None,
            "failure_mode": data["failure_mode"] or None,
            "dry_run": data["dry_run"],
            "queue": data["if_busy"] == "queue",
            "force": data["if_busy"] == "force",
            "idempotency_key": data["idempotency_key"] or None,
        }

    def renew_key(self):
        """Show the form again with a new idempotency key: submitted, it starts a new execution."""
        self.data = self.data.copy()
        self.data[self.add_prefix("idempotency_key")] = new_key()


def new_key() -> str:
    """A start form's idempotency key: a random UUID."""
    return str(uuid.uuid4())
