"""The shop's Celery app, exactly as Celery's Django guide ("First steps with Django") has it.

Switchyard has no Celery app of its own in a host project: its messages, its manager and its
agents all use this one (``celery.current_app``), configured from the ``CELERY_*`` settings.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop.settings")

app = Celery("shop")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
