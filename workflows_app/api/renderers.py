"""The API's JSON renderers, with DRF's default output whatever the host project's
``REST_FRAMEWORK`` says: DRF's ``JSONRenderer`` takes ``UNICODE_JSON``, ``COMPACT_JSON`` and
``STRICT_JSON`` from the project's settings when it is imported, and so do drf-spectacular's
JSON renderers of the schema, which derive from it."""

from drf_spectacular import renderers as spectacular
from rest_framework import renderers


class FixedJSONOutput:
    """Non-ASCII characters as they are, compact, and never NaN or Infinity (DRF's defaults)."""

    ensure_ascii = False
    compact = True
    strict = True


class JSONRenderer(FixedJSONOutput, renderers.JSONRenderer):
    """Every answer of the API but the schema and the documentation page."""


class OpenApiJsonRenderer(FixedJSONOutput, spectacular.OpenApiJsonRenderer):
    """The schema as ``application/vnd.oai.openapi+json``."""


class OpenApiJsonRenderer2(FixedJSONOutput, spectacular.OpenApiJsonRenderer2):
    """The schema as ``application/json``."""


#: The schema's renderers (GET schema): YAML by default, JSON on request.
SCHEMA_RENDERERS = (spectacular.OpenApiYamlRenderer, spectacular.OpenApiYamlRenderer2, OpenApiJsonRenderer,
                    OpenApiJsonRenderer2)
