"""The one base of every view of the API: its own authentication, permissions,
pagination, filters, parsers, renderers, content negotiation, error handling and schema class,
so that the API is the same in any Django project, whatever its ``REST_FRAMEWORK`` says; and
the one rule of what a write answers a user who may not view (``finalize_response``).

DRF's ``APIView`` takes each of these from the project's settings (``rest_framework.settings.
api_settings``), as class attributes fixed when DRF is imported, or read at each request
(``EXCEPTION_HANDLER``, ``URL_FORMAT_OVERRIDE``, ``FORMAT_SUFFIX_KWARG``...) from
``view.settings``. ``SwitchyardView`` sets every one of them from Switchyard's own settings
(``workflows_app.api.drf_settings``), ``view.settings`` included.

An app that adds an endpoint to the API (``agents`` adds ``GET agents``, see
``workflows_app.api.routes``) derives its view from ``SwitchyardView`` too.
"""

from rest_framework.views import APIView

from workflows_app.api.drf_settings import api_settings
from workflows_app.api.permissions import withhold_document


class SwitchyardView:
    """Mixed in first: ``class WorkflowList(SwitchyardView, generics.ListAPIView)``."""

    settings = api_settings
    authentication_classes = api_settings.DEFAULT_AUTHENTICATION_CLASSES
    permission_classes = api_settings.DEFAULT_PERMISSION_CLASSES
    throttle_classes = api_settings.DEFAULT_THROTTLE_CLASSES
    parser_classes = api_settings.DEFAULT_PARSER_CLASSES
    renderer_classes = api_settings.DEFAULT_RENDERER_CLASSES
    content_negotiation_class = api_settings.DEFAULT_CONTENT_NEGOTIATION_CLASS
    metadata_class = api_settings.DEFAULT_METADATA_CLASS
    versioning_class = api_settings.DEFAULT_VERSIONING_CLASS
    # GenericAPIView's (a plain APIView ignores them).
    pagination_class = api_settings.DEFAULT_PAGINATION_CLASS
    filter_backends = api_settings.DEFAULT_FILTER_BACKENDS
    # drf-spectacular's AutoSchema: DRF's APIView would take the host's DEFAULT_SCHEMA_CLASS.
    schema = api_settings.DEFAULT_SCHEMA_CLASS()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        mro = cls.__mro__
        if APIView in mro and mro.index(APIView) < mro.index(SwitchyardView):
            raise TypeError(f"{cls.__qualname__}: SwitchyardView must come before DRF's views in its bases, "
                            "or DRF's settings (the host project's) win")

    def get_exception_handler(self):
        """Switchyard's handler (every error ``{"error_code", "message"}``), not the host's."""
        return self.settings.EXCEPTION_HANDLER

    def finalize_response(self, request, response, *args, **kwargs):
        """A write's answer shows what it wrote only to a user who may view it; another gets an
        acknowledgement (``workflows_app.api.permissions.withhold_document``)."""
        return super().finalize_response(request, withhold_document(request, response), *args, **kwargs)
