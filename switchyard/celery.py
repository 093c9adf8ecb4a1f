"""The Celery app of every Switchyard process.

Configured from Django settings (``CELERY_*``). When the broker is the embedded Redis, the
first configuration of the app in a process makes sure that server runs: a process that
never touches Celery (``migrate``, ``check``) starts nothing.
"""

import os
import time

from celery import Celery
from celery.signals import task_postrun, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "switchyard.settings")

app = Celery("switchyard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Celery's Django fix-up closes the database connection before and after every task unless
# CELERY_DB_REUSE_MAX is set, and a new PostgreSQL connection (a backend process and its
# caches) costs more than the operation it serves. Keep it, and let Django decide between two
# tasks, as it does between two requests, whether it is too old (CONN_MAX_AGE), broken by an
# error, or dead (CONN_HEALTH_CHECKS).
app.conf["CELERY_DB_REUSE_MAX"] = 2**31

#: A connection idle longer than this is checked (and closed if dead or too old) before the
#: next task uses it. Between tasks that follow each other closely it is not: Django's check is
#: a ``SELECT 1`` round trip, as much as a quarter of what a no-op operation asks of the
#: database. A connection that failed is dropped after its task all the same.
IDLE_CHECK_SECONDS = 1.0
_last_task_end = [float("-inf")]


@task_prerun.connect
def _check_idle_connections(**kwargs):
    from django.db import close_old_connections

    if time.monotonic() - _last_task_end[0] > IDLE_CHECK_SECONDS:
        close_old_connections()


@task_postrun.connect
def _drop_failed_connections(**kwargs):
    from django.db import close_old_connections, connections

    _last_task_end[0] = time.monotonic()
    if any(conn.errors_occurred or conn.in_atomic_block or (conn.close_at is not None and _last_task_end[0] >= conn.close_at)
           for conn in connections.all(initialized_only=True)):
        close_old_connections()


@app.on_after_configure.connect
def _start_embedded_redis(sender, **kwargs):
    from switchyard import embedded_redis

    var_dir = embedded_redis.var_dir_of(sender.conf.broker_url or "")
    if var_dir is not None:
        embedded_redis.ensure_running(var_dir)
