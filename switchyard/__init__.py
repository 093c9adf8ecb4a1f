"""Switchyard's Django project: settings, URLs, the Celery app, WSGI."""

from switchyard.celery import app as celery_app

__all__ = ["celery_app"]
