"""Routes of the API, under whatever prefix the host project includes them at
(``path("api/v1/", include("workflows_app.api.urls"))``). Every path answers with and without a
trailing slash, the same way and without a redirect (``/?$``); any other path is a JSON 404.

Other apps' endpoints (``GET agents``) are registered in ``workflows_app.api.routes`` by their
``AppConfig.ready()``, which runs before any URLconf is loaded."""

from django.apps import apps
from django.urls import re_path

from workflows_app.api import metrics, routes, schedules, views, workflows
from workflows_app.api.docs import DocsView, SchemaView

apps.check_apps_ready()  # the registered routes are complete only then

app_name = "api"

_ID = r"(?P<id>[^/]+)"

urlpatterns = [
    re_path(r"^workflows/?$", views.WorkflowList.as_view(), name="workflows"),
    re_path(rf"^workflows/{_ID}/?$", workflows.WorkflowDetail.as_view(), name="workflow"),
    re_path(r"^executions/?$", views.ExecutionListCreate.as_view(), name="executions"),
    re_path(r"^executions/bulk/?$", views.ExecutionBulk.as_view(), name="executions-bulk"),  # before {id}
    re_path(rf"^executions/{_ID}/?$", views.ExecutionDetail.as_view(), name="execution"),
    re_path(rf"^executions/{_ID}/operations/?$", views.ExecutionOperations.as_view(), name="execution-operations"),
    re_path(rf"^executions/{_ID}/graph/?$", views.ExecutionGraph.as_view(), name="execution-graph"),
    re_path(rf"^executions/{_ID}/events/?$", views.ExecutionEvents.as_view(), name="execution-events"),
    re_path(r"^events/?$", views.EventList.as_view(), name="events"),
    re_path(r"^schedules/?$", schedules.ScheduleListCreate.as_view(), name="schedules"),
    re_path(rf"^schedules/{_ID}/?$", schedules.ScheduleDetail.as_view(), name="schedule"),
    re_path(r"^metrics/?$", metrics.MetricsView.as_view(), name="metrics"),
    *routes.urlpatterns(),
    re_path(r"^schema/?$", SchemaView.as_view(), name="schema"),
    re_path(r"^docs/?$", DocsView.as_view(), name="docs"),
    re_path(r"", views.NotFoundView.as_view(), name="not-found"),
]
