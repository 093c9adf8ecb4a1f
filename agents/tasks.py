"""Celery's autodiscovery imports this module: it registers the operation runner."""

from agents.runner import run_operation  # noqa: F401
