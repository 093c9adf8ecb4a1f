"""Every call to the broker: the only code that sends Celery messages, broadcasts remote-control
commands or asks the broker anything. A message names ids (and an attempt), never state; this
module writes no state either (the engine records what was sent).

The Celery app is the project's own, ``celery.current_app`` (Celery's Django convention: the
project's ``celery.py`` defines it, its package imports it, and Celery's Django fix-up makes it
the default app of every thread).

Callers run these from ``transaction.on_commit`` so a message never names a row that is not
committed yet: the engine's wake-ups through :func:`send_advance_on_commit`.

Every message says ``ignore_result=True`` itself. ``send_task`` does not read the task's or
the app's ``ignore_result`` (``task_ignore_result``): left out, the message says ``False``, which
overrides both in the worker. Each message would then make the sender subscribe to its result
channel, and the worker store a result in Redis and publish it. The result belongs in the
database, so neither is needed.

Every message also carries Celery's monitoring headers (``shadow``, ``argsrepr``,
``kwargsrepr``: :func:`operation_headers`, :func:`advance_headers`), so Flower, ``celery
events`` and the workers' logs name the workflow, the step and the operation instead of
``agents.run_operation`` and two ids. They only describe the message: its args are what the
worker reads.

Everything sent here is JSON, whatever the project's ``task_serializer`` or
``event_serializer`` say: Switchyard's workers accept nothing else
(``agents.worker.pool.json_only``). Messages say ``serializer="json"``; their ``task-sent``
events and the remote-control commands go through a dispatcher and a remote-control client of
Switchyard's own (:func:`_event_dispatcher`, :func:`_control`), set to JSON.

The test harness (``workflows_app.testing``) plays the managers and agents in the test's own
process: inside :func:`diverted`, the engine's messages go to it instead of the broker.
"""

import contextlib
import functools
import json
import logging
import secrets
import threading
from contextlib import contextmanager

import amqp.exceptions
import kombu
import redis.exceptions
from celery import current_app
from celery.utils.imports import instantiate
from django.db import transaction

from workflows_app import wire
from workflows_app.conf import workflows_settings
from workflows_app.models import Execution, Operation
from workflows_app.models.operation import task_id_for
from workflows_app import signing
from workflows_app.tracing import context as trace_context
from workflows_app.wire import keys

logger = logging.getLogger(__name__)

#: Where the engine's messages go instead of the broker, inside :func:`diverted`.
_outlet = None


@contextmanager
def diverted(outlet):
    """Inside the block, what the engine would send goes to ``outlet`` first, in this process:
    ``outlet.advance(execution_id)``, ``outlet.operations(operations)``, ``outlet.cancel(attempts)``,
    ``outlet.kill(attempts)`` and ``outlet.revoke(task_ids)`` (the test harness runs them itself).
    Each but ``advance`` returns what it leaves to the broker, sent as usual (the operations of an
    agent the harness runs for real, say). One outlet at a time."""
    global _outlet
    if _outlet is not None:
        raise RuntimeError("the broker is diverted already: one test harness at a time")
    _outlet = outlet
    try:
        yield outlet
    finally:
        _outlet = None

ADVANCE_TASK = "workflows_app.advance"
RUNNER_TASK = "agents.run_operation"
#: The options both tasks carry themselves, whatever the project's Celery settings say: a message
#: is acknowledged only after its task ran (and given back when its worker process dies), so a
#: message is never lost with a worker; fencing makes a second delivery harmless. The result
#: belongs in the database.
TASK_OPTIONS = {"ignore_result": True, "acks_late": True, "reject_on_worker_lost": True,
                "acks_on_failure_or_timeout": True}
#: The remote-control commands every Switchyard worker registers (``agents.worker.control``).
KILL_COMMAND = "switchyard_kill"
CANCEL_COMMAND = "switchyard_cancel"
RUNNING_COMMAND = "switchyard_running"
RESEND_COMMAND = "switchyard_resend_outcomes"
STOP_COMMAND = "switchyard_stop"
#: The one serializer of everything Switchyard sends.
SERIALIZER = "json"


def project_app():
    """The project's Celery app (the current one where Django was set up), or None when the
    project defines none and ``current_app`` is only Celery's unconfigured fallback."""
    app = current_app._get_current_object()
    return None if app.main == "default" and not app.fixups else app


#: Between the parts of a name shown in Flower: ``install › create_vm (create_vm)``.
NAME_SEPARATOR = " › "


def operation_headers(workflow_id, operation) -> dict:
    """Celery's monitoring headers for the message of ``operation``'s current attempt.

    ``shadow``, the name Flower lists and filters by (``taskname``), is ``<workflow> › <step>
    (<operation>)``: the same for every attempt, so the filter finds them all (the attempt is in
    the task id and ``argsrepr``). ``argsrepr`` says what the runner's two args stand for.
    ``kwargsrepr`` is the whole context as a Python literal, which Flower's search reads as
    key/value pairs: ``kwargs:execution=<id>`` lists every message of an execution,
    ``kwargs:step=<name>`` one step's. ``workflow_id`` may be None (not known): the name then
    starts at the step."""
    execution_id = str(operation.execution_id)
    step = f"{operation.name} ({operation.operation})"
    context = {"workflow": workflow_id, "execution": execution_id, "step": operation.name,
               "operation": operation.operation}
    return {
        "shadow": NAME_SEPARATOR.join([workflow_id, step]) if workflow_id else step,
        "argsrepr": f"(execution={execution_id!r}, step={operation.name!r}, attempt={operation.attempt})",
        "kwargsrepr": _literal(context),
    }


def advance_headers(execution_id, workflow_id=None) -> dict:
    """Celery's monitoring headers for an ``advance`` message: ``advance › <workflow>`` when the
    sender knows the workflow (no query is made to learn it), else Celery's own task name; the
    execution in ``argsrepr`` and, searchable as for an operation, in ``kwargsrepr``."""
    execution_id = str(execution_id)
    headers = {
        "argsrepr": f"(execution={execution_id!r})",
        "kwargsrepr": _literal({"workflow": workflow_id, "execution": execution_id}),
    }
    if workflow_id:
        headers["shadow"] = f"advance{NAME_SEPARATOR}{workflow_id}"
    return headers


def _literal(context) -> str:
    """``context`` without its unknown (None) values, as a Python literal."""
    return repr({key: value for key, value in context.items() if value is not None})


@functools.cache
def _event_dispatcher(app):
    """A disabled dispatcher, as Celery's own for ``task-sent``: it publishes through the
    producer it is given, as JSON."""
    return app.events.Dispatcher(enabled=False, serializer=SERIALIZER)


def _control():
    """The project's remote-control client (its class, exchange and queues), but one of
    Switchyard's own that sends its commands as JSON and takes only JSON replies: ``app.control``
    serializes with the project's ``task_serializer``, accepts its ``accept_content``, and is the
    project's to configure."""
    return _json_control(current_app._get_current_object())


@functools.cache
def _json_control(app):
    control = instantiate(app.control_cls, app=app)
    control.mailbox.serializer, control.mailbox.accept = SERIALIZER, [SERIALIZER]
    return control


def _announce(app, producer, task_id, headers, queue):
    """Publish the ``task-sent`` event of an operation's message, with the fields Celery gives it
    (under the message's shadow name, so Flower lists the step, not ``agents.run_operation``) —
    *before* the message, on the same producer, which Celery's ``send_task`` does after it.

    The order matters to Flower: its state (``celery.events.state.Task.event``) takes any event
    that comes after a ``task-retried`` as the task's new state. An agent runs a granted attempt
    as it comes, and its events (received, started, retried) could reach a monitor before a
    ``task-sent`` published after the message: the retried attempt was listed PENDING for good.
    Published first, on the connection that then publishes the message, the event is at the
    broker before the agent can take the message. Sent only where the project sends such events
    (``task_send_sent_event``), as Celery does."""
    if not app.conf.task_send_sent_event:
        return
    parent = app.current_worker_task  # a manager's pass: the advance that sends the operation
    parent_id = parent.request.id if parent else None
    root_id = (parent.request.root_id or parent_id) if parent else task_id
    _event_dispatcher(app).publish("task-sent", {
        "uuid": task_id, "root_id": root_id, "parent_id": parent_id, "name": headers["shadow"],
        "args": headers["argsrepr"], "kwargs": headers["kwargsrepr"], "retries": 0, "eta": None,
        "expires": None, "queue": queue, "exchange": "", "routing_key": queue,  # a direct queue's
    }, producer, retry=True)


class _NoSentEvent:
    """An ``event_dispatcher`` that publishes nothing where Celery would publish ``task-sent``,
    after the message: an ``advance`` has none, an operation's went before (:func:`_announce`)."""

    def publish(self, type, fields, producer, **kwargs):
        return None


_NO_SENT_EVENT = _NoSentEvent()


def send_advance(execution_id, workflow_id=None, countdown=None):
    """Ask a manager to run the execution's dispatcher (start, wake or finish it). A caller that
    holds the execution passes its ``workflow_id``, which only names the message in the
    manager's log and ``celery inspect``.

    An advance is the engine's own plumbing, not an operation: it publishes no task event — no
    ``task-sent`` here, and its task says ``send_events=False`` (``workflows_app.tasks``) — so
    Flower's task list (which keeps a bounded number of tasks) holds operations only, and a
    start, a wake-up or an imperative step does not pay for four event messages on its way.
    ``countdown``: seconds before a manager takes it (none: at once)."""
    if _outlet is not None:
        return _outlet.advance(str(execution_id))
    app = current_app
    app.send_task(ADVANCE_TASK, args=[str(execution_id)], queue=workflows_settings.MANAGEMENT_QUEUE,
                  ignore_result=True, serializer=SERIALIZER, event_dispatcher=_NO_SENT_EVENT, countdown=countdown,
                  **advance_headers(execution_id, workflow_id))


def send_advance_on_commit(execution):
    """:func:`send_advance` of ``execution`` once the current transaction commits (at once
    outside one): the pass it asks for must see what the transaction wrote."""
    transaction.on_commit(lambda: send_advance(execution.pk, execution.workflow_id))


def send_operations(operations, grants=None) -> list:
    """Send the current attempt of each operation to its agent's queue, all through one producer
    (one broker connection). The caller records them ``sent`` (``engine.progress.publish``).

    ``grants``: by operation id, what its attempt needs to run (``engine.grants``). A message
    carries its grant, and its proof under the agent's key covers the operation id, the attempt
    and the whole grant, so that the agent may run it as it comes; one without a grant is claimed.

    Each message is named after its workflow (:func:`operation_headers`), taken from the
    execution an operation holds (a caller that has the execution attaches it: no query), else
    read for all of them in one query.

    Returns those the broker refused, each with why: ``[(operation, reason)]`` (:func:`refusal`:
    sending it again would be refused again); the others are sent still. Any other error — a
    broker that cannot be reached — is raised, as it comes: what was not sent is sent again later."""
    operations = list(operations)
    if _outlet is not None:
        operations = _outlet.operations(operations)
        if not operations:
            return []
    app = current_app
    labels = _execution_labels(operations)
    redis = broker_is_redis()
    agent_keys = signing.agent_keys({operation.agent for operation in operations})
    refused = []
    with app.producer_or_acquire() as producer:
        for operation in operations:
            workflow_id, priority, trace = labels.get(str(operation.execution_id), (None, 0, ""))
            args = [str(operation.id), operation.attempt]
            grant = (grants or {}).get(operation.id)
            if grant is None:
                kwargs = {"proof": keys.prove(agent_keys[operation.agent], keys.Purpose.OPERATION, args)}
            else:
                kwargs = {"grant": grant,
                          "proof": keys.prove(agent_keys[operation.agent], keys.Purpose.OPERATION, [*args, grant])}
            task_id, headers = task_id_for(operation.id, operation.attempt), operation_headers(workflow_id, operation)
            try:
                _announce(app, producer, task_id, headers, operation.agent)
                app.send_task(
                    RUNNER_TASK,
                    args=args,
                    kwargs=kwargs,
                    task_id=task_id,
                    queue=operation.agent,
                    producer=producer,
                    ignore_result=True,
                    serializer=SERIALIZER,
                    priority=message_priority(priority, redis=redis),
                    headers=trace_context.message_headers(trace, workflow_id),  # its execution's trace
                    event_dispatcher=_NO_SENT_EVENT,  # announced above
                    **headers,
                )
            except Exception as exc:
                reason = refusal(exc, operation.agent)
                if reason is None:
                    raise
                logger.warning("the broker refused the message of operation %s to agent %r: %s",
                               operation.id, operation.agent, reason)
                refused.append((operation, reason))
    return refused


def refusal(exc, queue) -> str | None:
    """The broker's answer, when ``exc`` (raised by a publish to ``queue``) says that it refused
    that publish — and would refuse it again; else None (a broker that cannot be reached, a
    connection reset, anything else: the message may go through later).

    On RabbitMQ: a channel error that no retry mends (ACCESS_REFUSED, NOT_FOUND,
    PRECONDITION_FAILED: ``amqp.IrrecoverableChannelError``) in answer to the declare or the publish
    of ``queue`` (a method of the exchange, queue or basic class, and the broker's text names it),
    as when the queue was declared with other arguments, or the account may not write to it. Not an
    error of the connection (a login refused is ``Connection.*``), which is the broker's, not the
    queue's. On Redis: the queue's key holds another type of value (``WRONGTYPE``), or the
    account's ACL refuses that key (``NOPERM``). Kombu may wrap the error: its causes are read too."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, amqp.exceptions.IrrecoverableChannelError):
            if getattr(exc, "method_name", "").split(".")[0] in ("Exchange", "Queue", "Basic") and f"'{queue}'" in str(exc):
                return str(exc)
        elif isinstance(exc, redis.exceptions.ResponseError) and any(code in str(exc) for code in ("WRONGTYPE", "NOPERM")):
            return str(exc)
        exc = exc.__cause__ or exc.__context__
    return None


#: What an operation's message says of its execution: its workflow (the message's name), its
#: priority and its trace context.
LABEL_FIELDS = ("workflow_id", "priority", "trace_context")


def _execution_labels(operations) -> dict:
    """The :data:`LABEL_FIELDS` of each execution of ``operations`` (keys: execution ids as
    text): from the execution an operation holds when that was loaded with them, the others' in
    one query — never one per operation."""
    known, missing = {}, set()
    for operation in operations:
        key = str(operation.execution_id)
        if key in known:
            continue
        execution = operation.execution if Operation.execution.is_cached(operation) else None
        if execution is not None and not execution.get_deferred_fields() & set(LABEL_FIELDS):
            known[key] = tuple(getattr(execution, name) for name in LABEL_FIELDS)
        else:
            missing.add(key)
    missing -= known.keys()
    if missing:
        known.update((str(pk), tuple(labels)) for pk, *labels in
                     Execution.objects.filter(pk__in=missing).values_list("pk", *LABEL_FIELDS))
    return known


def message_priority(priority, *, redis) -> int:
    """The broker priority of an operation's message for an execution of ``priority`` (-100 to
    100; higher goes first), as a rank from 0 (first) to 9: above 0, ranks 2 to 0; 0, the
    default, rank 3; below 0, ranks 6 to 9. So with kombu's default four ``priority_steps`` on
    Redis (0, 3, 6, 9) every priority above the default goes ahead of it and every one below
    after it; with ten steps, eight levels. On Redis the rank is the priority (kombu takes from
    the lowest step first); on RabbitMQ, where a higher number goes first (in a queue declared
    with ``x-max-priority``: Celery's ``task_queue_max_priority``), 9 less the rank."""
    if priority > 0:
        rank = 2 - (priority - 1) * 3 // 100
    elif priority == 0:
        rank = 3
    else:
        rank = 6 + (-priority - 1) * 4 // 100
    return rank if redis else 9 - rank


def broadcast_kill(execution_id, attempts=(), *, dispatcher=False):
    """Ask every agent and manager to stop the process groups of ``attempts`` (pairs of operation
    id and attempt) and, with ``dispatcher``, the execution's dispatcher: SIGTERM now, SIGKILL
    after ``KILL_GRACE_SECONDS`` (``agents.worker.control``). Fire and forget: fencing covers a worker
    that does not hear it."""
    if _outlet is not None:
        attempts, dispatcher = _outlet.kill(list(attempts)), False
        if not attempts:
            return
    arguments = {"execution_id": str(execution_id), "attempts": proved_attempts(attempts, keys.Purpose.KILL),
                 "grace": float(workflows_settings.KILL_GRACE_SECONDS)}
    if dispatcher:  # the managers run dispatchers, under the management queue's name
        key = signing.agent_key(workflows_settings.MANAGEMENT_QUEUE)
        arguments["dispatcher"] = keys.prove(key, keys.Purpose.KILL_DISPATCHER, str(execution_id))
    _control().broadcast(KILL_COMMAND, arguments=arguments, reply=False)


def proved_attempts(attempts, purpose) -> list:
    """``[operation id, attempt, agent, proof]`` for each pair of ``attempts``: the agent its
    operation was sent to, and the proof under that agent's key that a manager asks ``purpose`` of
    that attempt. Any broker client may broadcast a command; a worker acts only on the attempts
    proved for it."""
    attempts = [(str(pk), attempt) for pk, attempt in attempts]
    if not attempts:
        return []
    agents = {str(pk): agent for pk, agent in Operation.objects.filter(pk__in={pk for pk, _ in attempts})
              .values_list("pk", "agent")}
    agent_keys = signing.agent_keys(set(agents.values()))
    return [[pk, attempt, agents[pk], keys.prove(agent_keys[agents[pk]], purpose, [pk, attempt])]
            for pk, attempt in attempts if pk in agents]


# --- the agents' reports ---------------------------------------------------------------------------

def reports_connection():
    """A broker connection of its own for reports and the answers to claims (``agents.worker.link``,
    ``agents.worker.inbox``): without heartbeats (it may sit idle through a long operation; kombu
    reconnects on the next use), and on RabbitMQ with publisher confirms, so that a publish
    returns only once the broker holds the message."""
    options = {} if broker_is_redis() else {"confirm_publish": True}
    return current_app.connection_for_write(heartbeat=0, transport_options=options)


def reports_queue():
    """The reports queue, bound to the exchange agents publish to on RabbitMQ."""
    name = wire.reports_queue()
    return kombu.Queue(name, kombu.Exchange(wire.reports_exchange(), "direct", durable=True), routing_key=name, durable=True)


def reports_route() -> dict:
    """Where a report is published (``Producer.publish`` options). On Redis, straight into the
    reports queue (a push onto its list, whatever happens to the exchanges' bindings). On RabbitMQ,
    to the reports exchange, which the managers declare and bind to the queue: an agent's own
    account needs no right on the queue, which holds every agent's reports, and none to configure
    the exchange, which it declares passively (``workflows_app.broker.shared``: the right to declare an
    exchange is the right to delete it)."""
    if broker_is_redis():
        queue = kombu.Queue(wire.reports_queue(), durable=True)
        return {"exchange": "", "routing_key": queue.name, "declare": [queue]}
    exchange = kombu.Exchange(wire.reports_exchange(), "direct", durable=True, passive=True)
    return {"exchange": exchange, "routing_key": wire.reports_queue(), "declare": [exchange]}


def declare_reports_queue():
    """Declare the reports queue and its binding (a starting manager does, before any agent's
    report needs them)."""
    with current_app.connection_for_write() as connection:
        reports_queue()(connection.default_channel).declare()


def broadcast_cancel(attempts):
    """Ask every agent and manager to tell the running ``attempts`` (pairs of operation id and
    attempt) that they are cancelled: ``ctx.is_cancelled()`` becomes true in them
    (``agents.worker.control``). Fire and forget: the engine asks again on each pass of a
    cancelling execution, and kills what still runs after CANCEL_TIMEOUT. Inside
    :func:`cancels_gathered`, sent with others."""
    if _outlet is not None:
        attempts = _outlet.cancel(list(attempts))
        if not attempts:
            return
    gathered = getattr(_gathered, "attempts", None)
    if gathered is not None:
        gathered.extend(attempts)
        if len(gathered) < GATHERED_CANCELS:
            return
        attempts, gathered[:] = list(gathered), []
    _control().broadcast(CANCEL_COMMAND, arguments={"attempts": proved_attempts(attempts, keys.Purpose.CANCEL)},
                         reply=False)


#: Attempts one gathered cancel broadcast names at most (``cancels_gathered``).
GATHERED_CANCELS = 500
_gathered = threading.local()


@contextmanager
def cancels_gathered():
    """Inside the block, this thread's :func:`broadcast_cancel` calls are gathered: one broadcast
    (and one query for their agents) per GATHERED_CANCELS attempts, the rest at the block's end,
    rather than one per call — a bulk cancel's one per execution cost a broker round trip and a
    query each. A cancel is fire and forget, asked again on each pass of a cancelling execution:
    one sent a moment later is no different. The rest is sent however the block ends (what that
    broadcast raises is raised)."""
    if getattr(_gathered, "attempts", None) is not None:  # gathered already, by an outer block
        yield
        return
    _gathered.attempts = []
    try:
        yield
    finally:
        attempts, _gathered.attempts = _gathered.attempts, None
        if attempts:
            broadcast_cancel(attempts)


def waiting_messages(queue):
    """How many messages wait in ``queue`` now; ``None`` when the broker cannot say."""
    if _outlet is not None:
        return 0  # what the harness was given, it has run
    # Redis keeps a queue as a list, which goes when it empties: a passive declare refuses a queue
    # that holds nothing, and a declare there creates nothing. On RabbitMQ a declare would.
    passive = not broker_is_redis()
    try:
        with current_app.connection_for_read() as connection:
            return connection.default_channel.queue_declare(queue=queue, passive=passive).message_count
    except Exception:  # an unknown queue, a broker that does not count: unknown, not an error
        logger.debug("could not count the messages of %s", queue, exc_info=True)
        return None


def purge(queue_name) -> int:
    """Drop every message waiting in the queue ``queue_name``; how many (0 for a queue that does
    not exist). The test harness does, for the queue of an agent it starts."""
    with current_app.connection_for_write() as connection:
        channel = connection.channel()
        try:
            channel.queue_declare(queue=queue_name, passive=True)
        except Exception:  # no such queue (RabbitMQ closes the channel): nothing waits in it
            return 0
        return channel.queue_purge(queue_name) or 0


def revoke(task_ids, *, terminate=False):
    """Celery's own bookkeeping for stopped attempts: a worker discards a revoked message it has
    not started, and with ``terminate`` signals the pool process running it. Fencing, not this
    in-memory list, is the guarantee (a worker started later never heard of it)."""
    task_ids = list(task_ids)
    if _outlet is not None:
        task_ids = _outlet.revoke(task_ids)
    if task_ids:
        _control().revoke(task_ids, terminate=terminate, signal="SIGTERM")


#: How long a stop waits for the answers of the agents it names.
STOP_REPLY_SECONDS = 2.0


def broadcast_stop(attempts, hosts) -> dict:
    """Ask the agents holding ``attempts`` (pairs of operation id and attempt, sent to them and
    not started) never to start them (``agents.worker.control``'s stop), and wait up to
    STOP_REPLY_SECONDS for their answers. ``hosts``: each agent's host name (its Celery worker is
    ``<agent>@<host>``). Returns ``{(operation id, attempt): "refused" | "running" | "ended"}``
    for the attempts an agent answered for, with its proof for this question; an agent that did
    not answer in time answers for none."""
    found = {}
    if _outlet is not None:
        found, attempts = _outlet.stop(list(attempts))
    nonce = secrets.token_hex(16)
    proved = proved_attempts(attempts, keys.Purpose.STOP)
    destination = sorted({f"{agent}@{hosts[agent]}" for _, _, agent, _ in proved if hosts.get(agent)})
    if not destination:
        return found
    # On Redis a connection of its own, closed here: one returned to the pool keeps the wait for
    # replies it stopped reading (a BRPOP), which a process forked later blocks on as it closes the
    # pool's connections. On RabbitMQ the pooled one (None: Celery's own).
    own = current_app.connection_for_write() if broker_is_redis() else contextlib.nullcontext()
    try:
        with own as connection:
            replies = _control().broadcast(STOP_COMMAND, arguments={"attempts": proved, "nonce": nonce}, reply=True,
                                           destination=destination, limit=len(destination), timeout=STOP_REPLY_SECONDS,
                                           connection=connection)
    except Exception as exc:  # noqa: BLE001 — a broker that cannot be reached: no answer, the grants are waited for
        logger.warning("could not ask %s to stop %d attempt(s): %s", ", ".join(destination), len(proved), exc)
        return found
    answers = [answer.get("ok") for reply in replies or [] for answer in reply.values() if isinstance(answer, dict)]
    answers = [ok for ok in answers if isinstance(ok, dict) and isinstance(ok.get("agent"), str)
               and isinstance(ok.get("answers"), dict)]
    agent_keys = signing.agent_keys({answer["agent"] for answer in answers})
    sent_to = {(pk, attempt): agent for pk, attempt, agent, _ in proved}
    for answer in answers:
        if not keys.proven(answer.get("proof"), agent_keys[answer["agent"]], keys.Purpose.STOPPED,
                           {**keys.without_proof(answer), "nonce": nonce}):
            logger.warning("ignored an answer to a stop that agent %s did not prove", values_shown(answer["agent"]))
            continue
        for key, verdict in answer["answers"].items():
            pk, _, attempt = str(key).rpartition(".")
            if attempt.isdigit() and sent_to.get((pk, int(attempt))) == answer["agent"] and verdict in STOP_ANSWERS:
                found[(pk, int(attempt))] = verdict
    return found


#: What an agent answers a stop with, for each attempt.
STOP_ANSWERS = ("refused", "running", "ended")


def values_shown(name) -> str:
    return repr(str(name)[:80])


def ask_resend_outcomes(attempts):
    """Ask every agent and manager to send again the outcome reports of the ``attempts`` (pairs
    of operation id and attempt) that ended on it a while ago (``agents.worker.control``): the
    database still has them started, so the one it sent was lost. Fire and forget: the manager's
    tick asks again."""
    _control().broadcast(RESEND_COMMAND, arguments={"attempts": proved_attempts(attempts, keys.Purpose.RESEND)},
                         reply=False)


def ask_running(timeout):
    """Ask every worker (``switchyard_running``) what it runs; the answers that arrive within
    ``timeout`` seconds, one dict per worker: ``{"agent", "incarnation", "running"}``. Only
    answers proved by their agent for this question (its ``nonce``) count: a forged one saying
    that an agent runs nothing would make its running attempts lost, and run again."""
    nonce = secrets.token_hex(16)
    answers = []
    for reply in _control().broadcast(RUNNING_COMMAND, arguments={"nonce": nonce}, reply=True, timeout=timeout) or []:
        for answer in reply.values():
            ok = answer.get("ok") if isinstance(answer, dict) else None
            if isinstance(ok, dict) and isinstance(ok.get("agent"), str):
                answers.append(ok)
    agent_keys = signing.agent_keys({answer["agent"] for answer in answers})
    proved = [answer for answer in answers if keys.proven(answer.get("proof"), agent_keys[answer["agent"]],
                                                          keys.Purpose.RUNNING, {**keys.without_proof(answer), "nonce": nonce})]
    if len(proved) < len(answers):
        logger.warning("ignored %d answer(s) to what runs where that their agents did not prove",
                       len(answers) - len(proved))
    return [keys.without_proof(answer) for answer in proved]


def broker_is_redis() -> bool:
    """Whether the broker is Redis (the embedded one included), which keeps no queue across a
    restart and holds a dead consumer's messages until its visibility timeout."""
    return str(current_app.conf.broker_url or "").startswith(("redis://", "rediss://", "redis+socket://", "unix://"))


def broker_identity():
    """The broker server's identity (Redis' ``run_id``, new after each restart), or None for a
    broker that keeps its queues across a restart (RabbitMQ's durable queues)."""
    if not broker_is_redis():
        return None
    with current_app.connection_for_write() as connection:
        return connection.default_channel.client.info("server").get("run_id")


def _held_for(entry):
    """The queue a message held in kombu's ``unacked`` hash was taken from: its routing key
    (``[message, exchange, routing key]``; a queue's key is its name). None for an entry that is
    not one of those (written by anyone but kombu)."""
    try:
        return json.loads(entry)[2]
    except (ValueError, TypeError, IndexError, KeyError):
        return None


def give_back_held(queue) -> int:
    """Put back at the head of ``queue`` every message of it that a consumer took and never
    acknowledged; returns how many. For a queue that nothing consumes now: an agent's, before its
    worker starts, whose earlier run died holding them.

    On Redis such a message waits in kombu's ``unacked`` hash until the visibility timeout (an
    hour) gives it back; this is kombu's own restore of one, by its delivery tag. RabbitMQ gives
    a dead consumer's messages back itself: 0."""
    if not broker_is_redis():
        return 0
    with current_app.connection_for_write() as connection:
        channel = connection.default_channel
        with channel.conn_or_acquire() as client:
            held = [tag for tag, entry in client.hscan_iter(channel.unacked_key)
                    if _held_for(entry) == queue]
        for tag in held:
            channel.qos.restore_by_tag(tag, leftmost=True)
    return len(held)


def task_ids_held(queue, limit):
    """The task ids of the messages that wait in ``queue`` or that a consumer took from it and has
    not acknowledged yet (kombu's ``unacked`` hash): on Redis, every message that is somewhere
    for it. None when the broker cannot say — RabbitMQ, whose queues are not read without taking
    their messages, and a queue that holds more than ``limit`` messages (a backlog, not read
    through). A message that is not kombu's (anyone may push onto the list) names no task."""
    if _outlet is not None or not broker_is_redis():
        return None
    with current_app.connection_for_read() as connection:
        channel = connection.default_channel
        with channel.conn_or_acquire() as client:
            lists = [channel._q_for_pri(queue, step) for step in channel.priority_steps]
            if sum(client.llen(name) for name in lists) > limit:
                return None
            messages = [_envelope(raw) for name in lists for raw in client.lrange(name, 0, -1)]
            for _tag, entry in client.hscan_iter(channel.unacked_key):
                if _held_for(entry) == queue:
                    messages.append(_envelope(entry, held=True))
    ids = {(message.get("headers") or {}).get("id") for message in messages if isinstance(message, dict)}
    return {task_id for task_id in ids if isinstance(task_id, str)}


def _envelope(raw, *, held=False):
    """A kombu message as Redis keeps it (in a queue's list; ``held``: its ``unacked`` entry,
    ``[message, exchange, routing key]``), or None for anything else."""
    try:
        envelope = json.loads(raw)
        return envelope[0] if held else envelope
    except (ValueError, TypeError, IndexError, KeyError):
        return None
