"""What every pool process of a Switchyard worker (a manager or an agent) does, through Celery's
signals: it leads its own process group, keeps its database connection from one task to the
next, and records the dispatcher it runs, and the local steps its passes run (:class:`PoolHost`).
``prepare`` sets up the worker before it starts.

Imported by ``run_manager`` and ``run_agent`` before Celery forks its pool, so the receivers are
connected in every pool process; a Celery worker the project runs for its own tasks is left alone.
"""

import contextlib
import logging
import os
import time

from celery.backends.base import E_NO_BACKEND
from celery.signals import task_postrun, task_prerun, worker_process_init
from celery.utils.text import match_case
from django.db import close_old_connections, connections

from agents.worker import grants, local
from workflows_app.broker import ADVANCE_TASK
from workflows_app.local_steps import host

#: A connection idle longer than this is checked (and closed if dead or too old) before the
#: next task uses it. Between tasks that follow each other closely it is not: Django's check is
#: a ``SELECT 1`` round trip, as much as a quarter of what a no-op operation asks of the
#: database. A connection that failed is dropped after its task all the same.
IDLE_CHECK_SECONDS = 1.0
_last_task_end = [float("-inf")]


def prepare(app):
    """Settings of ``app``'s worker that Switchyard needs whatever the project configured (the
    tasks carry their own acknowledgement options: ``broker.TASK_OPTIONS``).

    An operation running when the broker connection drops runs on: its result goes to the
    database, not the broker, and what the broker lost is sent again from the database.
    A channel the broker closes is a connection lost too, not the end of the worker: RabbitMQ
    closes the channel of a consumer that holds a message unacknowledged longer than its
    ``consumer_timeout`` (30 minutes by default), which every operation that runs longer does, as
    messages are acknowledged late. Left to Celery, that channel error ends the worker once the
    operation is over; here the worker reconnects, the operation runs on and reports to the
    database, and fencing drops the message RabbitMQ delivers again.

    Celery's Django fix-up closes the database connection before and after every task unless
    ``CELERY_DB_REUSE_MAX`` is set, and a new PostgreSQL connection (a backend process and its
    caches) costs more than the operation it serves. Keep it, and let Django decide between two
    tasks, as it does between two requests, whether it is too old (CONN_MAX_AGE), broken by an
    error, or dead (CONN_HEALTH_CHECKS): :func:`_check_idle_connections`,
    :func:`_drop_failed_connections`.

    And JSON only (:func:`json_only`), whatever the project accepts; and no warning for each
    revoke where no result backend is configured (:class:`NoBackendToMark`)."""
    override(app, "worker_cancel_long_running_tasks_on_connection_loss", False)
    override(app, "broker_connection_retry_on_startup", True)
    override(app, "broker_channel_error_retry", True)
    app.conf["CELERY_DB_REUSE_MAX"] = 2**31
    json_only(app)
    grants.install(app)  # when its broker connection began: what was granted before it is claimed
    host.install(PoolHost())
    revokes = logging.getLogger("celery.worker.control")
    if not any(isinstance(each, NoBackendToMark) for each in revokes.filters):
        revokes.addFilter(NoBackendToMark())


class NoBackendToMark(logging.Filter):
    """Celery's worker writes every revoked task to the result backend and warns when it cannot:
    where none is configured — Switchyard needs none, its results are in the database — each
    cancel, kill and resume logged "Failed to mark task … as revoked in backend: No result backend
    is configured". That warning is left out; one from a backend that is configured and failed
    is not."""

    def filter(self, record):
        failure = record.args[-1] if isinstance(record.args, tuple) and record.args else None
        return not (str(record.msg).startswith("Failed to mark task %s as revoked in backend")
                    and isinstance(failure, NotImplementedError) and str(failure) == _NO_BACKEND)


#: What Celery's backend stand-in raises where no result backend is configured.
_NO_BACKEND = E_NO_BACKEND.strip()


#: The one content type a Switchyard worker takes from the broker.
JSON = "json"


def json_only(app):
    """Make ``app``'s worker accept JSON messages only — on its queues, as remote-control commands
    and as events — and send its events and remote-control replies as JSON, whatever the project's
    ``accept_content`` and serializers say. A message of another
    content type is refused before its body is read: kombu raises ``ContentDisallowed``, and
    Celery logs it ("Refusing to deserialize untrusted content") and rejects the message.

    Celery reads ``accept_content`` when the worker makes its task consumer, and the remote-control
    mailbox takes it (and the serializer of its replies) when ``app.control`` is first made, which
    may have been before this (a starting manager asks the workers what they run): the mailbox is
    set here too. The project's ``task_serializer`` is left alone: Switchyard's own messages say
    ``serializer="json"`` themselves (``workflows_app.broker``), and an operation's code may send
    the project's own tasks as the project does, and read their results as it does: results,
    which Switchyard never reads, are accepted as the project's ``accept_content`` said (Celery
    falls back on it when ``result_accept_content`` is unset)."""
    if app.conf.result_accept_content is None:
        override(app, "result_accept_content", list(app.conf.accept_content))
    override(app, "accept_content", [JSON])
    override(app, "event_serializer", JSON)
    mailbox = app.control.mailbox
    mailbox.accept, mailbox.serializer = [JSON], JSON


def override(app, key, value):
    """Set the Celery setting ``key`` (its new, lower-case name) so that it wins over the project's
    configuration. Setting ``app.conf.<key>`` alone does not when the project configured its app
    from Django's settings with a namespace (``config_from_object(..., namespace="CELERY")``):
    Celery then looks ``CELERY_ACCEPT_CONTENT`` up first, in every source, the project's settings
    included, before ``accept_content``. That name is set too."""
    conf = app.conf
    conf.finalize()  # the namespace is known once the project's configuration is read
    conf[key] = value
    if conf.prefix:
        conf[match_case(conf.prefix + key, conf.prefix)] = value


class PoolHost(host.Host):
    """A local step a pass runs in this pool process is recorded as running here, as an operation
    this worker runs for its queue is: a starting manager asking the workers what they run hears
    of it, and a kill of the attempt finds this process group. Its started attempt carries this
    run's incarnation."""

    def incarnation(self) -> str:
        return local.incarnation()

    @contextlib.contextmanager
    def running(self, operation_id, attempt):
        key = local.attempt_key(operation_id, attempt)
        local.mark_running(key)
        try:
            yield
        finally:
            local.mark_done(key)

    def cancel_requested(self, operation_id, attempt) -> bool:
        return local.cancel_requested(local.attempt_key(operation_id, attempt))


@worker_process_init.connect
def _own_process_group(**kwargs):
    # Each pool process leads its own process group, so that killing an operation (or a
    # dispatcher) reaches every subprocess it started, and not the worker itself.
    os.setpgid(0, 0)


@task_prerun.connect
def _check_idle_connections(sender=None, args=None, **kwargs):
    if time.monotonic() - _last_task_end[0] > IDLE_CHECK_SECONDS:
        close_old_connections()
    if getattr(sender, "name", None) == ADVANCE_TASK and args:
        # Recorded while it runs, so that a kill can find this process group (control.terminate).
        local.mark_running(local.dispatcher_key(args[0]))


@task_postrun.connect
def _drop_failed_connections(sender=None, args=None, **kwargs):
    if getattr(sender, "name", None) == ADVANCE_TASK and args:
        local.mark_done(local.dispatcher_key(args[0]))
    _last_task_end[0] = time.monotonic()
    if any(conn.errors_occurred or conn.in_atomic_block or (conn.close_at is not None and _last_task_end[0] >= conn.close_at)
           for conn in connections.all(initialized_only=True)):
        close_old_connections()
