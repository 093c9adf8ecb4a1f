"""URLs: Django admin at /admin/; the REST API under /api/v1/."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("workflows_app.api.urls")),
]
