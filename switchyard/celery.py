"""The Celery app of this repository's demo project, defined as Celery's Django guide shows (a
host project defines its own the same way; Switchyard uses whichever is the project's).

Configured from Django settings (``CELERY_*``). When the broker is the embedded Redis, the first
configuration of the app in a process starts that server (``workflows_app.embedded_redis``).
"""

import os

from celery import Celery

from switchyard import telemetry

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchyard.settings")
telemetry.configure_or_exit()  # OpenTelemetry's SDK, when OTEL_TRACES_EXPORTER asks for it

app = Celery("switchyard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
