"""URLs: Django admin at /admin/ (``/`` leads there); the REST API under /api/v1/."""

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="admin:index")),
    path("admin/", admin.site.urls),
    path("api/v1/", include("workflows_app.api.urls")),
]
