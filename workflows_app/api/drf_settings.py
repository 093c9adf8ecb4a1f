"""DRF's settings as Switchyard's API reads them: DRF's defaults and the values below,
never the ``REST_FRAMEWORK`` setting of the project the API is installed in.

A host project's ``REST_FRAMEWORK`` configures the host's own API (``AllowAny``, page-number
pagination, the browsable API...). Switchyard's views take none of it: their base class
(``workflows_app.api.base.SwitchyardView``) reads its configuration from ``api_settings``
here, which DRF's ``setting_changed`` reload never touches either.

What DRF reads from its global settings while it serializes rather than from a view (the
format of timestamps, big integers as strings, ``NON_FIELD_ERRORS_KEY``) is dealt with where
it is read: ``workflows_app.api.serializers`` and ``workflows_app.api.errors``.
"""

from rest_framework.settings import DEFAULTS, IMPORT_STRINGS, APISettings

#: What the API's views use (import strings, resolved on first use, as in ``REST_FRAMEWORK``).
SETTINGS = {
    # DRF token or a session (a browser logged in at the admin); every endpoint needs a user,
    # every read the view permission (what a write needs, its service checks).
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["workflows_app.api.permissions.ReadsNeedView"],
    # Per user, reads and writes apart, at WORKFLOWS["API_THROTTLE_RATES"], never the
    # host's throttles or rates, which are for the host's own API.
    "DEFAULT_THROTTLE_CLASSES": [
        "workflows_app.api.throttling.ReadRateThrottle",
        "workflows_app.api.throttling.WriteRateThrottle",
    ],
    # Every error: {"error_code", "message"}.
    "EXCEPTION_HANDLER": "workflows_app.api.errors.exception_handler",
    # Every list: ?limit=&offset=, filtered by django-filter FilterSets.
    "DEFAULT_PAGINATION_CLASS": "workflows_app.api.pagination.Pagination",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    # JSON in and out; the documentation page (GET docs) is the HTML.
    "DEFAULT_PARSER_CLASSES": ["workflows_app.api.parsers.StrictJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["workflows_app.api.renderers.JSONRenderer"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "workflows_app.api.negotiation.ContentNegotiation",
    "DEFAULT_METADATA_CLASS": "rest_framework.metadata.SimpleMetadata",
    # One version: the one of the URL prefix the host chose.
    "DEFAULT_VERSIONING_CLASS": None,
    # The schema is drf-spectacular's, whatever schema class the host's own API uses.
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}

api_settings = APISettings(user_settings=SETTINGS, defaults=DEFAULTS, import_strings=IMPORT_STRINGS)
