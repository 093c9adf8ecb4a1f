"""OpenAPI annotations (drf-spectacular): the error responses and the parameters the views
share, the preprocessing hook that names paths without their trailing slash, and the schema
of ``workflow_id``. Every status an operation can answer is documented, with the one error
shape, so that a client (or a fuzzer) can trust the schema."""

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse

from workflows_app.api.filters import EXECUTION_ORDERING, ORDERING_HELP
from workflows_app.api.serializers import ErrorSerializer
from workflows_app.registry import workflows

_ERRORS = {
    400: "invalid input: `parse_error` (the body is not JSON), `invalid_parameters` (a wrong type, "
         "a value out of range, a filter value that is none of its field's values)",
    401: "no credentials (`not_authenticated`) or bad ones (`authentication_failed`)",
    403: "`permission_denied`: a missing permission, or a session request without its CSRF token",
    404: "`not_found`: no such execution (an id that is not a UUID too)",
    409: "the execution's status refuses it",
    415: "`unsupported_media_type`: the body must be application/json",
}


def errors(*codes, **descriptions):
    """``{status: error response}`` for ``extend_schema(responses=...)``; a keyword ``e400=...``
    replaces the description of one status."""
    return {code: OpenApiResponse(ErrorSerializer, description=descriptions.get(f"e{code}", _ERRORS[code]))
            for code in codes}


#: Every GET: a bad query (filter, pagination) and missing credentials.
READ_ERRORS = (400, 401)

EXECUTION_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="the execution's id")

#: ``ordering`` of the executions, as django-filter's extension documents it, with at least one
#: field: ``?ordering=`` (an empty list) is refused, as it cannot be told from ``[""]``.
EXECUTION_ORDERING_PARAMETER = OpenApiParameter(
    "ordering", {"type": "array", "minItems": 1, "items": {
        "type": "string", "enum": sorted(f"{sign}{field}" for field in EXECUTION_ORDERING for sign in ("", "-"))}},
    OpenApiParameter.QUERY, style="form", explode=False, description=ORDERING_HELP)


def paths_without_trailing_slash(endpoints):
    """drf-spectacular preprocessing hook: ``/api/v1/executions/`` (from the route's ``/?$``)
    is documented as ``/api/v1/executions``, as SPEC §8 names it."""
    return [(path.rstrip("/") if path != "/" else path, path_regex, method, callback)
            for path, path_regex, method, callback in endpoints]


class WorkflowIdFieldExtension(OpenApiSerializerFieldExtension):
    """``workflow_id`` of a start: one of the workflows registered in the process that generates
    the schema (``GET /workflows`` lists them too)."""

    target_class = "workflows_app.api.serializers.WorkflowIdField"

    def map_serializer_field(self, auto_schema, direction):
        schema = {"type": "string", "description": "a registered workflow (GET /api/v1/workflows)"}
        names = sorted(workflows())
        if names:  # an enum cannot be empty
            schema["enum"] = names
        return schema
