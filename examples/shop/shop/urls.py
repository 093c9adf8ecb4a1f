"""The shop's URLs: its own API, the admin (Switchyard's executions and agents included) and
Switchyard's REST API under a prefix of the shop's choosing."""

from django.contrib import admin
from django.urls import include, path

from shop import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("health", views.health),
    path("orders/<str:order_id>/receipt", views.receipt),
    path("receipts/<uuid:result_id>", views.receipt_status),
    path("ops/api/", include("workflows_app.api.urls")),
]
