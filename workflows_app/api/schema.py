"""The OpenAPI schema (drf-spectacular): how it is generated, and the annotations the views share.

Generation (``SchemaGenerator``, used by ``GET schema``, ``GET docs`` and ``manage.py spectacular
--generator-class workflows_app.api.schema.SchemaGenerator``) documents the endpoints of this
API only, not the host project's, under the prefix the host includes the API at, with
drf-spectacular's settings as Switchyard needs them (``SPECTACULAR_SETTINGS`` below over
drf-spectacular's defaults), whatever the host's ``SPECTACULAR_SETTINGS`` say. It names only the
workflows the requesting user may see, as ``GET workflows`` lists them: a workflow whose own
permission the user lacks, and its parameters, are not in the schema (nor the docs page) it
receives (:func:`documented_workflows`).

Annotations: the error responses and the parameters the views share, the preprocessing hook
that names paths without their trailing slash, the schema of ``workflow_id``, the
postprocessing hook that documents the start's body per workflow, with the schema of its
parameters (:func:`start_request_per_workflow`), and the one that documents what a write
answers a user who may not view (:func:`acknowledgement_of_writes`). Every status
an operation can answer is documented, with the one error shape, so that a client (or a
fuzzer) can trust the schema. The views annotate their methods with ``extend_schema`` from
here, not drf-spectacular's (see its docstring).
"""

import contextvars
import inspect
import re
import threading
from contextlib import contextmanager

from django.urls import get_script_prefix, reverse
from drf_spectacular import generators, plumbing
from drf_spectacular.extensions import OpenApiSerializerExtension, OpenApiSerializerFieldExtension
from drf_spectacular.settings import SPECTACULAR_DEFAULTS, spectacular_settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from drf_spectacular.utils import extend_schema as spectacular_extend_schema

from workflows_app.api.base import SwitchyardView
from workflows_app.api.drf_settings import api_settings
from workflows_app.api.filters import EXECUTION_ORDERING, ORDERING_HELP
from workflows_app import permissions
from workflows_app.api.serializers import ErrorSerializer
from workflows_app.registry import workflows

#: drf-spectacular's settings for Switchyard's schema, over drf-spectacular's defaults (every
#: other key is reset to its default while the schema is generated); ``SCHEMA_PATH_PREFIX`` is
#: where the host includes the API. (The agents' status enum needs no override: drf-spectacular
#: names it ``AgentStatusEnum`` after its component.)
SPECTACULAR_SETTINGS = {
    "TITLE": "Switchyard API",
    "DESCRIPTION": "Durable workflow executions: start, watch, cancel, kill and resume them. "
                   "Every error is {\"error_code\", \"message\"}; every list is paginated with limit/offset.",
    "VERSION": "1",
    # Request bodies get their own components (…Request), with their own constraints.
    "COMPONENT_SPLIT_REQUEST": True,
    # Paths answer with and without a trailing slash; the schema names them without.
    "PREPROCESSING_HOOKS": ["workflows_app.api.schema.paths_without_trailing_slash"],
    # The start's body, one variant per registered workflow, with the schema of its parameters.
    "POSTPROCESSING_HOOKS": [*SPECTACULAR_DEFAULTS["POSTPROCESSING_HOOKS"],
                             "workflows_app.api.schema.start_request_per_workflow",
                             "workflows_app.api.schema.acknowledgement_of_writes",
                             "workflows_app.api.schema.bulk_filter_selects_something"],
    "ENUM_NAME_OVERRIDES": {
        "ExecutionStatusEnum": "workflows_app.states.ExecutionStatus",
        "OperationStateEnum": "workflows_app.states.OperationState",
        "FailureModeEnum": "workflows_app.states.FailureMode",
        "EventTypeEnum": "workflows_app.states.EventType",
        "WarningCodeEnum": "workflows_app.states.WarningCode",
        "OverlapPolicyEnum": "workflows_app.states.OverlapPolicy",
        "SlotOutcomeEnum": "workflows_app.states.SlotOutcome",
        # The actions on an execution: POST /executions/{id} and POST /executions/bulk take the same.
        "ExecutionActionEnum": "workflows_app.api.serializers.ACTIONS",
    },
}

#: drf-spectacular's settings it refuses to patch: they configure its own views, which
#: ``workflows_app.api.docs.SchemaView`` sets as attributes instead.
_NOT_PATCHABLE = ("SERVE_", "DEFAULT_GENERATOR_CLASS")


def mount_prefix(request=None) -> str:
    """Where the host includes ``workflows_app.api.urls``: ``/api/v1/`` in the demo project
    (without the script prefix, as the schema's paths are). With a request, the instance of the
    URLconf that answered it."""
    namespace = getattr(getattr(request, "resolver_match", None), "namespace", None)
    path = reverse("api:not-found", current_app=namespace or None)
    script = get_script_prefix()
    return "/" + path[len(script):] if path.startswith(script) else path


def spectacular_settings_for(prefix) -> dict:
    """Every drf-spectacular setting as Switchyard's schema needs it."""
    return {
        **{key: value for key, value in SPECTACULAR_DEFAULTS.items() if not key.startswith(_NOT_PATCHABLE)},
        **SPECTACULAR_SETTINGS,
        "SCHEMA_PATH_PREFIX": re.escape(prefix.rstrip("/")),
    }


_lock = threading.RLock()
_depth = 0


def _clear_caches():
    # drf-spectacular caches ENUM_NAME_OVERRIDES once loaded, per language (not per settings).
    for name in ("_load_enum_name_overrides", "load_enum_name_overrides"):
        getattr(getattr(plumbing, name, None), "cache_clear", lambda: None)()


@contextmanager
def switchyard_spectacular_settings(request=None):
    """drf-spectacular's (global) settings patched as Switchyard's schema needs them, then put back.

    Re-entrant (the schema view and its generator both ask), and one thread at a time: two
    patches at once would put back each other's values."""
    global _depth
    with _lock:
        outer = _depth == 0
        _depth += 1
        try:
            if outer:
                _clear_caches()
                spectacular_settings.apply_patches(spectacular_settings_for(mount_prefix(request)))
            yield
        finally:
            _depth -= 1
            if outer:
                spectacular_settings.clear_patches()
                _clear_caches()


#: Whom the schema being generated is for: the user of its request, None without one (the
#: server's own access: ``manage.py spectacular``).
_reader = contextvars.ContextVar("switchyard_schema_reader", default=None)


def documented_workflows() -> dict:
    """The registered workflows the schema being generated names, by name: those its reader may
    see, as ``GET workflows`` lists them (not those whose own permission it lacks:
    ``workflows_app.permissions.hidden_workflows``); every one for the server's own access."""
    hidden = set(permissions.hidden_workflows(_reader.get()))
    return {name: definition for name, definition in workflows().items() if name not in hidden}


class SchemaGenerator(generators.SchemaGenerator):
    """Switchyard's schema: the endpoints of its API (the views derived from ``SwitchyardView``
    under its prefix) and nothing else of the host project, with Switchyard's settings. It names
    the workflows the request's user may see (:func:`documented_workflows`), every one without
    a request."""

    _prefix = "/"

    def get_schema(self, request=None, public=False):
        reader = _reader.set(getattr(request, "user", None) if request is not None else None)
        try:
            with switchyard_spectacular_settings(request):
                self._prefix = mount_prefix(request)
                return super().get_schema(request=request, public=public)
        finally:
            _reader.reset(reader)

    def _initialise_endpoints(self):
        if self.endpoints is None:
            super()._initialise_endpoints()
            self.endpoints = [(path, path_regex, method, callback)
                              for path, path_regex, method, callback in self.endpoints
                              if issubclass(getattr(callback, "cls", type), SwitchyardView)
                              and (path + "/").startswith(self._prefix)]


def extend_schema(**kwargs):
    """drf-spectacular's ``extend_schema``, based on the views' own schema class.

    On a view's method, drf-spectacular's decorator extends DRF's ``DEFAULT_SCHEMA_CLASS`` as
    it is when the view is imported: the host project's (DRF's own ``AutoSchema`` unless it
    says otherwise), whose methods then come before drf-spectacular's when the schema is
    generated, and the operation is not documented. This one extends the schema class of
    ``SwitchyardView``."""
    decorate = spectacular_extend_schema(**kwargs)

    def decorator(f):
        if callable(f) and not inspect.isclass(f) and "schema" not in getattr(f, "kwargs", {}):
            f.kwargs = {**getattr(f, "kwargs", {}), "schema": api_settings.DEFAULT_SCHEMA_CLASS}
        return decorate(f)

    return decorator

_ERRORS = {
    400: "invalid input: `parse_error` (the body is not JSON, or in a charset it cannot be read in), "
         "`invalid_parameters` (a wrong type, a value out of range, a filter value that is none of its "
         "field's values)",
    401: "no credentials (`not_authenticated`) or bad ones (`authentication_failed`)",
    403: "`permission_denied`: a missing permission, or a session request without its CSRF token",
    404: "`not_found`: no such execution (an id that is not a UUID too)",
    409: "the execution's status refuses it",
    413: "`payload_too_large`: the body is larger than the server takes (Django's "
         "DATA_UPLOAD_MAX_MEMORY_SIZE, 2.5 MB by default), or a value in it is larger than "
         "WORKFLOWS['MAX_PAYLOAD_BYTES']; nothing was stored",
    415: "`unsupported_media_type`: the body must be application/json",
    429: "`throttled`: the user made more requests than WORKFLOWS['API_THROTTLE_RATES'] allows (reads and "
         "writes apart); the header Retry-After says how many seconds to wait",
}

#: What every operation may answer: a user's requests are throttled everywhere (``workflows_app.api.throttling``).
ALWAYS = (429,)


def errors(*codes, **descriptions):
    """``{status: error response}`` for ``extend_schema(responses=...)``, with :data:`ALWAYS`; a
    keyword ``e400=...`` replaces the description of one status."""
    return {code: OpenApiResponse(ErrorSerializer, description=descriptions.get(f"e{code}", _ERRORS[code]))
            for code in (*codes, *ALWAYS)}


#: Every GET: a bad query (filter, pagination), missing credentials, a user who may not view.
READ_ERRORS = (400, 401, 403)

EXECUTION_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="the execution's id")

#: ``ordering`` of the executions, as django-filter's extension documents it, with at least one
#: field: ``?ordering=`` (an empty list) is refused, as it cannot be told from ``[""]``.
EXECUTION_ORDERING_PARAMETER = OpenApiParameter(
    "ordering", {"type": "array", "minItems": 1, "items": {
        "type": "string", "enum": sorted(f"{sign}{field}" for field in EXECUTION_ORDERING for sign in ("", "-"))}},
    OpenApiParameter.QUERY, style="form", explode=False, description=ORDERING_HELP)


def paths_without_trailing_slash(endpoints):
    """drf-spectacular preprocessing hook: ``/api/v1/executions/`` (from the route's ``/?$``)
    is documented as ``/api/v1/executions``, without its trailing slash."""
    return [(path.rstrip("/") if path != "/" else path, path_regex, method, callback)
            for path, path_regex, method, callback in endpoints]


class WorkflowIdFieldExtension(OpenApiSerializerFieldExtension):
    """``workflow_id`` of a start: one of the workflows registered in the process that generates
    the schema that its reader may see (``GET /workflows`` lists them too)."""

    target_class = "workflows_app.api.serializers.WorkflowIdField"

    def map_serializer_field(self, auto_schema, direction):
        schema = {"type": "string", "description": f"a registered workflow (GET {mount_prefix()}workflows)"}
        names = sorted(documented_workflows())
        if names:  # an enum cannot be empty
            schema["enum"] = names
        return schema


class StrictSerializerExtension(OpenApiSerializerExtension):
    """A body that refuses a key none of its fields names says so: ``additionalProperties: false``,
    so that a client (or a generator of test requests) knows an extra key is a 400."""

    target_class = "workflows_app.api.serializers.StrictSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        if direction == "request":
            schema["additionalProperties"] = False
        return schema


#: The component of the start's body (drf-spectacular's, from ``StartExecutionSerializer``).
START_REQUEST = "StartExecutionRequest"
#: The operation whose body is documented per workflow.
START_OPERATION = "executions_create"


def start_request_per_workflow(result, generator, request, public):
    """drf-spectacular postprocessing hook: the body of ``POST executions`` is one of a variant
    per registered workflow the reader may see (:func:`documented_workflows`), told apart by
    ``workflow_id`` (an OpenAPI discriminator, which client generators turn into one type per
    workflow):

    * ``StartParameters_<workflow>``: the JSON Schema of its parameters (``GET workflows``
      gives it as ``schema``), written as OpenAPI 3.0 (:func:`openapi_schema`);
    * ``StartExecutionRequest_<workflow>``: ``StartExecutionRequest`` with ``workflow_id`` that
      workflow's name and ``parameters`` of that schema (required when the workflow has a
      required parameter).

    Without such a workflow the body stays ``StartExecutionRequest``."""
    schemas = result.get("components", {}).get("schemas", {})
    names = sorted(documented_workflows().items())
    if START_REQUEST not in schemas or not names:
        return result
    mapping = {}
    for name, definition in names:
        component = _component_name(name, schemas)
        parameters_ref = {"$ref": f"#/components/schemas/StartParameters_{component}"}
        takes_none = not definition.schema.get("required")
        if takes_none:  # parameters may be left out, or null
            parameters_ref = {"allOf": [parameters_ref], "nullable": True}
        schemas[f"StartParameters_{component}"] = {
            **openapi_schema(definition.schema), "description": f"The parameters of the workflow `{name}`."}
        schemas[f"{START_REQUEST}_{component}"] = {"allOf": [{"$ref": f"#/components/schemas/{START_REQUEST}"}, {
            "type": "object",
            "properties": {"workflow_id": {"type": "string", "enum": [name]},
                           "parameters": parameters_ref},
            "required": ["workflow_id"] + ([] if takes_none else ["parameters"]),
        }], "description": f"Starts the workflow `{name}`: `{START_REQUEST}`, with these fields narrowed."}
        mapping[name] = f"#/components/schemas/{START_REQUEST}_{component}"
    for item in result.get("paths", {}).values():
        for operation in item.values():
            if isinstance(operation, dict) and operation.get("operationId") == START_OPERATION:
                operation["requestBody"]["content"]["application/json"]["schema"] = {
                    "oneOf": [{"$ref": ref} for ref in mapping.values()],
                    "discriminator": {"propertyName": "workflow_id", "mapping": mapping}}
    return result


#: The component of what a write answers a user who may not view what it wrote
#: (``workflows_app.api.permissions.acknowledgement``).
ACKNOWLEDGEMENT = "Acknowledgement"
_WRITES = ("post", "put", "patch", "delete")


#: The component of a bulk action's filter (``workflows_app.api.serializers.BulkFilterSerializer``).
BULK_FILTER_REQUEST = "BulkFilterRequest"


def bulk_filter_selects_something(result, generator, request, public):
    """drf-spectacular postprocessing hook: a bulk action's filter names at least one filter, or
    ``all`` true — an empty one is refused (``workflows_app.bulk.selection.NoFilter``), so the
    schema says so (``anyOf``: one alternative per filter, and ``all: true``)."""
    schema = result.get("components", {}).get("schemas", {}).get(BULK_FILTER_REQUEST)
    if schema is None:
        return result
    filters = [name for name in schema.get("properties", {}) if name != "all"]
    schema["anyOf"] = [{"required": [name]} for name in filters] + [
        {"required": ["all"], "properties": {"all": {"type": "boolean", "enum": [True]}}}]
    return result


def acknowledgement_of_writes(result, generator, request, public):
    """drf-spectacular postprocessing hook: every write's success (2xx) with a body answers either
    its document or, to a user who may not view it (``workflows_app.api.permissions.
    withhold_document``), an ``Acknowledgement``."""
    paths = result.get("paths", {})
    writes = {id(response): response for item in paths.values() for method, operation in item.items()
              if method in _WRITES and isinstance(operation, dict)
              for code, response in operation.get("responses", {}).items()
              if str(code).startswith("2") and "application/json" in response.get("content", {})}
    if not writes:
        return result
    result.setdefault("components", {}).setdefault("schemas", {})[ACKNOWLEDGEMENT] = {
        "type": "object",
        "description": "What a write answers a user who may act but not view (the permission "
                       "`workflows_app.view_execution`, and the workflow's own if it was registered with one): "
                       "it was done; the document it wrote is not shown.",
        "properties": {
            "id": {"type": "string", "nullable": True,
                   "description": "the id of the execution, schedule or event it acted on or created"},
            "message": {"type": "string", "description": "done, and the permission the document needs"},
        },
        "required": ["id", "message"],
    }
    acknowledged = {"$ref": f"#/components/schemas/{ACKNOWLEDGEMENT}"}
    for response in writes.values():
        content = response["content"]["application/json"]
        if acknowledged in content["schema"].get("anyOf", ()):
            continue  # a response drf-spectacular shares between operations
        content["schema"] = {"anyOf": [content["schema"], acknowledged]}
        described = (response.get("description") or "").rstrip()
        response["description"] = f"{described}\n\n`{ACKNOWLEDGEMENT}` instead for a user who may not view it.".lstrip()
    return result


def _component_name(workflow, schemas) -> str:
    """The workflow's name as a component's may be (letters, digits, ``.``, ``-``, ``_``), not
    yet taken."""
    base = re.sub(r"[^A-Za-z0-9._-]", "_", workflow)[:100] or "_"
    name, n = base, 1
    while f"StartParameters_{name}" in schemas:
        n += 1
        name = f"{base}_{n}"
    return name


def openapi_schema(schema):
    """A JSON Schema of ``workflows_app.parameters`` as an OpenAPI 3.0 schema object, which has no
    type ``null``: a null alternative (``Optional[X]``) becomes ``nullable``."""
    def inner(key, value):
        if key == "properties":
            return {name: openapi_schema(sub) for name, sub in value.items()}
        return openapi_schema(value) if key in ("items", "additionalProperties") and isinstance(value, dict) else value

    converted = {key: inner(key, value) for key, value in schema.items() if key != "anyOf"}
    if "anyOf" in schema:
        members = [openapi_schema(member) for member in schema["anyOf"] if member != {"type": "null"}]
        converted = {**members[0], **converted} if len(members) == 1 else {"anyOf": members, **converted}
        if len(members) < len(schema["anyOf"]):
            converted["nullable"] = True
    if converted.get("type") == "null":
        del converted["type"]
        converted.update(enum=[None], nullable=True)
    if None in converted.get("enum", ()):
        converted["nullable"] = True
    return converted
