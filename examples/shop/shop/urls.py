"""The shop's URLs: its own API, the admin (Switchyard's executions and agents included) and
Switchyard's REST API under a prefix of the shop's choosing."""

from django.contrib import admin
from django.urls import include, path

from shop import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("health", views.health),
    path("ops/api/", include("workflows_app.api.urls")),
]
