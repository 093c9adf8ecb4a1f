"""The Celery app of every Switchyard process.

Configured from Django settings (``CELERY_*``). When the broker is the embedded Redis, the
first configuration of the app in a process makes sure that server runs: a process that
never touches Celery (``migrate``, ``check``) starts nothing.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchyard.settings")

app = Celery("switchyard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_configure.connect
def _start_embedded_redis(sender, **kwargs):
    from switchyard import embedded_redis

    var_dir = embedded_redis.var_dir_of(sender.conf.broker_url or "")
    if var_dir is not None:
        embedded_redis.ensure_running(var_dir)
