"""``GET /api/v1/metrics``: the metrics (``workflows_app.metrics``) in Prometheus' text format.

Who may scrape: a user who may view executions, as for every read of the API (401 without
credentials, 403 ``permission_denied`` without ``view_execution``), who sees nothing of the
workflows whose own permission it lacks; or a Prometheus server presenting
``Authorization: Bearer <WORKFLOWS["METRICS_TOKEN"]>``, which sees every series. A bearer token
that is not that one — or any, when the setting is ``None`` — is 401 ``authentication_failed``.
An error is the API's JSON ``{"error_code", "message"}``, whatever the scrape accepts (and so is
the answer to OPTIONS).
"""

import secrets

from django.contrib.auth.models import AnonymousUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse
from prometheus_client import CONTENT_TYPE_LATEST
from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.renderers import BaseRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from workflows_app import metrics
from workflows_app.api.base import SwitchyardView
from workflows_app.api.permissions import ReadsNeedView
from workflows_app.api.renderers import JSONRenderer
from workflows_app.api.schema import extend_schema
from workflows_app.api.schema import errors as error_responses
from workflows_app.api.serializers import ErrorSerializer
from workflows_app.conf import workflows_settings

#: The authentication scheme of the scrape token (RFC 6750's).
BEARER = "bearer"


class ScrapeToken:
    """``request.auth`` of a scrape that presented the token: the server's own access."""


class ScrapeTokenAuthentication(BaseAuthentication):
    """``Authorization: Bearer <token>``, compared in constant time with ``WORKFLOWS["METRICS_TOKEN"]``.
    Another scheme is left to the API's other authentications."""

    def authenticate(self, request):
        # Read from META, not DRF's get_authorization_header, which raises on a header that is
        # not Latin-1 (a test client's); a server hands every header over as Latin-1 text.
        scheme, _, given = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme.lower() != BEARER:
            return None
        expected = workflows_settings.METRICS_TOKEN
        if expected is None:
            raise AuthenticationFailed("no scrape token is accepted: WORKFLOWS['METRICS_TOKEN'] is not set")
        if not secrets.compare_digest(given.strip().encode("utf-8", "surrogatepass"), expected.encode()):
            raise AuthenticationFailed("wrong scrape token")
        return AnonymousUser(), ScrapeToken()

    def authenticate_header(self, request):
        return 'Bearer realm="api"'


class ScrapeTokenScheme(OpenApiAuthenticationExtension):
    """The scrape token in the schema: a bearer token (``GET metrics`` takes it besides the API's own)."""

    target_class = ScrapeTokenAuthentication
    name = "scrapeToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer",
                "description": "GET metrics only: the token of WORKFLOWS['METRICS_TOKEN'], for Prometheus"}


class ScrapeOrReadsNeedView(ReadsNeedView):
    """The scrape token, or a user who may view executions (``ReadsNeedView``)."""

    def has_permission(self, request, view):
        return isinstance(request.auth, ScrapeToken) or super().has_permission(request, view)


class PrometheusTextRenderer(BaseRenderer):
    """The exposition ``workflows_app.metrics`` made, as it is."""

    media_type = "text/plain"
    format = "prometheus"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return data


class MetricsView(SwitchyardView, APIView):
    """The metrics, in Prometheus' text format."""

    authentication_classes = (ScrapeTokenAuthentication, *SwitchyardView.authentication_classes)
    permission_classes = (ScrapeOrReadsNeedView,)
    renderer_classes = (PrometheusTextRenderer,)

    @extend_schema(
        operation_id="metrics_retrieve", summary="Metrics for Prometheus",
        description="The executions by workflow and status, the operations by state, histograms of the durations "
                    "of ended executions and operations and of the time operations wait in their agents' queues, "
                    "the agents online, each schedule's lateness, the executions queued per concurrency key and the "
                    "reports waiting for a manager, in Prometheus' text format, read from the database at each "
                    "request. Needs `workflows_app.view_execution` (a user sees nothing of the workflows whose own "
                    "permission it lacks), or the header `Authorization: Bearer <token>` with "
                    "`WORKFLOWS['METRICS_TOKEN']`, which sees every series.",
        responses={
            (200, PrometheusTextRenderer.media_type): OpenApiResponse(
                OpenApiTypes.STR, description="Prometheus' text exposition format"),
            **{(code, JSONRenderer.media_type): response
               for code, response in error_responses(401, 403, e401=(
                   "no credentials (`not_authenticated`), or bad ones (`authentication_failed`): a wrong scrape "
                   "token, or any when `WORKFLOWS['METRICS_TOKEN']` is not set")).items()},
            (406, JSONRenderer.media_type): OpenApiResponse(
                ErrorSerializer, description="`not_acceptable`: the request accepts no text/plain"),
        })
    def get(self, request, *args, **kwargs):
        scraper = None if isinstance(request.auth, ScrapeToken) else request.user
        return Response(metrics.exposition(scraper), content_type=CONTENT_TYPE_LATEST)

    def finalize_response(self, request, response, *args, **kwargs):
        if not isinstance(getattr(response, "data", None), bytes):
            # An error, or OPTIONS' description of the endpoint: the API's JSON, as everywhere,
            # not text for Prometheus, whatever was negotiated.
            request.accepted_renderer, request.accepted_media_type = JSONRenderer(), JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)
