"""A host project's URLconf: its admin, an endpoint of its own API, and Switchyard's
API under a prefix of its choosing."""

from django.contrib import admin
from django.urls import include, path
from rest_framework.decorators import api_view
from rest_framework.exceptions import NotFound

PREFIX = "/ops/v2"


@api_view(["GET"])
def host_endpoint(request):
    """The host's own API, under the host's REST_FRAMEWORK (its exception handler, ...)."""
    raise NotFound("nothing here")


urlpatterns = [
    path("admin/", admin.site.urls),
    path("host/thing", host_endpoint),
    path("ops/v2/", include("workflows_app.api.urls")),
]
