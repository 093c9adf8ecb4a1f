"""A host project's URLconf with Switchyard's API at its root and no admin."""

from django.urls import include, path

urlpatterns = [
    path("", include("workflows_app.api.urls")),
]
