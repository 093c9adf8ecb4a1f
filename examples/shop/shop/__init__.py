# The project's Celery app is loaded with Django, so that @shared_task uses it
# (Celery's "First steps with Django"). Switchyard sends and runs its messages with it too.
from .celery import app as celery_app

__all__ = ("celery_app",)
