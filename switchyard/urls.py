"""URLs: Django admin at /admin/; the REST API arrives under /api/v1/ (SPEC §8)."""

from django.contrib import admin
from django.urls import path

urlpatterns = [
    path("admin/", admin.site.urls),
]
