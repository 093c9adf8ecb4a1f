"""A host project's settings that contradict everything Switchyard's API does: its
REST_FRAMEWORK and SPECTACULAR_SETTINGS below, another time zone, and Switchyard's API under
another prefix (``tests.api.host_urls``).

``tests/api/test_host_settings.py`` applies them to the test process with ``override_settings``,
and also runs itself in a process of its own with this module as its settings, so that DRF and
drf-spectacular find them when they are imported, as in a real host project (DRF's views and
drf-spectacular's take some settings as class attributes, once). That process has a database of
its own (SQLite, in memory).
"""

from switchyard.settings import *  # noqa: F403

HOSTILE_REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 2,
    "DEFAULT_FILTER_BACKENDS": ["rest_framework.filters.SearchFilter"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.BrowsableAPIRenderer",
                                 "rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.FormParser", "rest_framework.parsers.JSONParser"],
    "EXCEPTION_HANDLER": "rest_framework.views.exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["rest_framework.throttling.AnonRateThrottle",
                                 "rest_framework.throttling.UserRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"anon": "1/day", "user": "1/day"},
    "DEFAULT_SCHEMA_CLASS": "rest_framework.schemas.openapi.AutoSchema",
    "DEFAULT_VERSIONING_CLASS": "rest_framework.versioning.QueryParameterVersioning",
    "ALLOWED_VERSIONS": ["9"],
    "DEFAULT_METADATA_CLASS": None,
    "URL_FORMAT_OVERRIDE": "fmt",
    "FORMAT_SUFFIX_KWARG": "id",  # Switchyard's routes have an ``id``: it is not a format
    "NON_FIELD_ERRORS_KEY": "everything",
    "DATETIME_FORMAT": "%d/%m/%Y %H:%M",
    "COERCE_BIGINT_TO_STRING": True,
    "UNICODE_JSON": False,
    "COMPACT_JSON": False,
}

HOSTILE_SPECTACULAR_SETTINGS = {
    "TITLE": "Host API",
    "VERSION": "42",
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "SERVE_INCLUDE_SCHEMA": True,
    "SERVE_PUBLIC": False,
    "SERVE_URLCONF": "switchyard.urls",
    "SCHEMA_PATH_PREFIX": "/host",
    "SCHEMA_PATH_PREFIX_TRIM": True,
    "SCHEMA_PATH_PREFIX_INSERT": "/inserted",
    "SERVERS": [{"url": "https://host.example"}],
    "COMPONENT_SPLIT_REQUEST": False,
    "PREPROCESSING_HOOKS": [],
    "POSTPROCESSING_HOOKS": [],  # not even drf-spectacular's enum naming
    "ENUM_NAME_OVERRIDES": {"HostStatusEnum": "workflows_app.states.ExecutionStatus"},
    "ENUM_SUFFIX": "Choices",
    "ENUM_GENERATE_CHOICE_DESCRIPTION": False,
    "CAMELIZE_NAMES": True,
    "SORT_OPERATIONS": False,
}

ROOT_URLCONF = "tests.api.host_urls"
TIME_ZONE = "Europe/Paris"
REST_FRAMEWORK = HOSTILE_REST_FRAMEWORK
SPECTACULAR_SETTINGS = HOSTILE_SPECTACULAR_SETTINGS
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
