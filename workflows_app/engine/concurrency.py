"""Concurrency limits: at most N active executions per key; the others wait ``queued`` and
start, in the order they were created, as slots free up.

An execution counts against up to two keys, and starts only when both have room:

* its workflow's, when the workflow has a limit (``@workflow(concurrency=N,
  concurrency_key=...)``): the value :func:`key_of` makes when the execution is built, stored on
  ``Execution.concurrency_key``. N is read from the workflow's current registration whenever it
  is needed, never stored: a limit changed in the code holds, from the next promotion on, for
  the executions already waiting too. A workflow limit always queues; ``force`` does not pass it.
* its deployment's (``deployment_id``, limit 1): the deployment lock. A start with ``force``
  does not count against it (it runs beside the deployment's active execution, and is stored
  ``forced``); a start without ``queue`` that would wait for its
  deployment is refused (``ExistingRunningExecution``) instead, with nothing stored.

Admitted are the executions in every active status but ``queued``. An execution is admitted
when, for each of its keys, the key's admitted executions and its queued ones created before
it are fewer than the limit: the first ones of a key's queue take its free slots, so a new start
never goes ahead of a waiting one, and one that waits for its other key keeps its place (and a
slot) in this one. Every admission, of a new start (:func:`admit`) or of a queued execution
(:func:`start_next`), locks the key's row (``ConcurrencyKey``; the rows of two keys in the order
of their names) in the transaction that stores it: any number of processes may start and
promote executions of a key at once, and never admit more than its limit.

When an execution ends (or a queued one is cancelled), the first queued ones of its keys are
tried (:func:`start_next_when_ended`, one of ``engine.reactions``); the manager's tick tries
every key with queued executions and a free slot (:func:`start_every_free_key`), so a promotion
lost to a crash, or owed to a limit raised, is not lost.

Resume and force-resume are not admissions: a resumed execution runs at once, beside the others,
and counts against its keys while it runs.
"""

import hashlib
import json

from django.db import transaction
from django.db.models import Count, Q

from workflows_app import broker, values
from workflows_app.errors import ParameterError, RegistrationError
from workflows_app.models import ConcurrencyKey, Execution, PausedWorkflow
from workflows_app.registry import CONCURRENCY_DEPLOYMENT as DEPLOYMENT
from workflows_app.registry import get_workflow
from workflows_app.states import EXECUTION_ACTIVE, EXECUTION_HOLDING_DEPLOYMENT, ExecutionStatus
from workflows_app.transitions import execution_transition

#: The longest key ``Execution.concurrency_key`` holds; a longer one is cut and hashed (:func:`key_of`).
MAX_KEY = Execution._meta.get_field("concurrency_key").max_length
#: The lock row of a deployment's key: ``deployment:<deployment_id>``. A workflow key of the same
#: text would share the row, which costs only waiting: what counts is read from the executions.
DEPLOYMENT_ROW = "deployment:"
#: Queued executions of a key without limit (its workflow's limit removed) tried per query.
BATCH = 500
#: What a promotion reads of a queued execution before it locks it: its keys and its place.
CANDIDATE_FIELDS = ("pk", "created_at", "workflow_id", "deployment_id", "concurrency_key", "forced")


def key_of(definition, parameters, deployment_id) -> str:
    """The key an execution of the workflow ``definition`` counts against ("" when the workflow
    has no limit): the workflow's name, then the parameter (or the deployment) and its value as
    JSON — ``provision:customer="acme"``, ``provision:deployment="site-1"`` — or the name alone
    without ``concurrency_key``. A parameter not given counts with its default; an execution
    without a deployment counts as ``null``. A key longer than :data:`MAX_KEY` is cut, and ends
    with the SHA-256 of the whole key, so two values never share one. Raises ``ParameterError``
    for a value that cannot make a key (not JSON, or text that cannot be stored)."""
    if not definition.concurrency:
        return ""
    name = definition.concurrency_key
    if name is None:
        key = definition.name
    else:
        if name == DEPLOYMENT:
            value = deployment_id
        else:
            defaults = {p["name"]: p["default"] for p in definition.parameters()}
            value = parameters[name] if name in parameters else defaults.get(name)
        try:
            text = json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise ParameterError(f"parameter {name!r} is the concurrency key of workflow {definition.name!r}, and its "
                                 f"value cannot make one: {exc}") from None
        key = f"{definition.name}:{name}={text}"
    problem = values.string_problem(key)
    if problem:
        raise ParameterError(f"the concurrency key of workflow {definition.name!r} cannot be stored: {problem}")
    if len(key) > MAX_KEY:
        digest = hashlib.sha256(key.encode()).hexdigest()
        key = f"{key[:MAX_KEY - len(digest) - 8]}…sha256:{digest}"
    return key


def limit_of(workflow_id) -> int | None:
    """The workflow's limit as registered now; None (no limit) for one that has none, or that is
    no longer registered (its executions start, and its dispatcher fails them)."""
    try:
        return get_workflow(workflow_id).concurrency
    except RegistrationError:
        return None


class Key:
    """A key: the row its admissions lock, the executions that count against it, its limit."""

    def __init__(self, row, members, limit, deployment_id=None):
        self.row, self.members, self.limit, self.deployment_id = row, members, limit, deployment_id

    def __repr__(self):
        return f"<Key {self.row!r} limit={self.limit}>"

    @classmethod
    def of_workflow(cls, key, workflow_id):
        # The excluded "" repeats the condition of the partial index execution_concurrency, so that
        # PostgreSQL uses it whatever the key's value (a prepared statement's too).
        return cls(key, Q(concurrency_key=key) & ~Q(concurrency_key=""), limit_of(workflow_id))

    @classmethod
    def of_deployment(cls, deployment_id):
        return cls(DEPLOYMENT_ROW + deployment_id, Q(deployment_id=deployment_id), 1, deployment_id)

    def admitted(self):
        return Execution.objects.filter(self.members, status__in=EXECUTION_HOLDING_DEPLOYMENT)

    def queued(self, ahead_of=None):
        """Its queued executions in the order they start: created first, first (two created at the
        same instant, in either order); only those created before ``ahead_of`` when given."""
        waiting = Execution.objects.filter(self.members, status=ExecutionStatus.QUEUED)
        if ahead_of is not None:
            waiting = waiting.filter(created_at__lt=ahead_of.created_at)
        return waiting.order_by("created_at")

    def room(self) -> int | None:
        """Free slots: the limit less the admitted executions (None: no limit)."""
        if self.limit is None:
            return None
        # Counted whole, not cut at the limit: the admitted ones are few, and a count of a LIMIT
        # subquery makes PostgreSQL's planner expect to find them at once in a scan of the table.
        return self.limit - self.admitted().count()

    def has_room(self, ahead_of=None) -> bool:
        """Whether an execution may be admitted now: fewer queued ones are ahead of it than there
        are free slots. ``ahead_of``: the queued execution; None for a new one, which every
        queued one is ahead of. At most that many queued ones are read, in order, from the
        index: a key with 10,000 waiting costs no more than one with none."""
        room = self.room()
        if room is None:
            return True
        return room > 0 and len(self.queued(ahead_of).values_list("pk", flat=True)[:room]) < room


def keys_for_start(execution, *, force=False) -> list[Key]:
    """The keys a new execution counts against: its workflow's, and its deployment's unless forced."""
    keys = []
    if execution.deployment_id and not force:  # first: a start refused by it is refused whatever the other says
        keys.append(Key.of_deployment(execution.deployment_id))
    if execution.concurrency_key:
        keys.append(Key.of_workflow(execution.concurrency_key, execution.workflow_id))
    return keys


def keys_of(execution) -> list[Key]:
    """The keys a stored execution counts against (a forced one: not its deployment's)."""
    return keys_for_start(execution, force=execution.forced)


def lock(keys):
    """Lock the rows of ``keys`` until the transaction ends, creating those that do not exist."""
    rows = sorted({key.row for key in keys})
    # Locks are taken in the order of the names, so two admissions never wait for each other.
    # With two rows, the missing ones are created before either is locked: a transaction holding
    # one row while it creates the other could wait for a transaction that waits for it.
    if len(rows) > 1:
        found = set(ConcurrencyKey.objects.filter(key__in=rows).values_list("key", flat=True))
        if len(found) < len(rows):
            ConcurrencyKey.objects.bulk_create([ConcurrencyKey(key=row) for row in rows if row not in found],
                                               ignore_conflicts=True)
    locked = list(ConcurrencyKey.objects.select_for_update().filter(key__in=rows).order_by("key")
                  .values_list("key", flat=True))
    if len(locked) < len(rows):  # one row, new: nothing is held while it is created
        ConcurrencyKey.objects.bulk_create([ConcurrencyKey(key=row) for row in rows], ignore_conflicts=True)
        list(ConcurrencyKey.objects.select_for_update().filter(key__in=rows).values_list("key", flat=True))


class Blocked:
    """Why a new execution may not start now: the key without room and, for a deployment, the
    execution it waits behind (its active one, or the first queued one)."""

    def __init__(self, key, behind):
        self.key, self.behind = key, behind

    @property
    def is_deployment(self) -> bool:
        return self.key.deployment_id is not None

    def message(self) -> str:
        if self.is_deployment:
            return f"queued behind {self.behind}"
        return f"queued: {self.key.row} has no free slot (at most {self.key.limit} at once)"


def admit(keys) -> Blocked | None:
    """Whether a new execution of ``keys`` (their rows locked: :func:`lock`) may start now. None:
    it may; else why not, for the first key without room (its deployment's, when both have none)."""
    for key in keys:
        if not key.has_room():
            if key.deployment_id is None:
                return Blocked(key, None)
            # Read whole and unordered: the admitted ones are few (see Key.room).
            holders = list(key.admitted().order_by().values_list("pk", flat=True))
            return Blocked(key, holders[0] if holders else key.queued().values_list("pk", flat=True).first())
    return None


def start_next(key) -> list[Execution]:
    """Start the first queued executions of ``key`` while it has room, in order: each is tried
    with every key it counts against (:func:`try_start`). Returns those started."""
    first = list(key.queued().only("pk")[:1])
    if not first:
        return []
    room = key.room()
    if room is not None and room <= 0:
        return []
    started = []
    if room is not None:
        # Beyond the first ``room`` queued ones, none has room: fewer slots than those ahead of it.
        candidates = list(key.queued().only(*CANDIDATE_FIELDS)[:room])
        started = [execution for execution in map(try_start, candidates) if execution is not None]
        return started
    after = None
    while True:  # no limit any more: every queued one may start, but for its other key
        page = key.queued().order_by("created_at", "pk").only(*CANDIDATE_FIELDS)
        if after is not None:
            page = page.filter(Q(created_at__gt=after.created_at) | Q(created_at=after.created_at, pk__gt=after.pk))
        page = list(page[:BATCH])
        started += [execution for execution in map(try_start, page) if execution is not None]
        if len(page) < BATCH:
            return started
        after = page[-1]


def try_start(candidate) -> Execution | None:
    """Admit the queued ``candidate`` if each of its keys has room for it now: ``pending``, and
    sent once committed. None if it may not (or is no longer queued)."""
    keys = keys_of(candidate)
    with transaction.atomic():
        lock(keys)
        execution = (Execution.objects.select_for_update(no_key=True)
                     .filter(pk=candidate.pk, status=ExecutionStatus.QUEUED).first())
        if execution is None or not all(key.has_room(ahead_of=execution) for key in keys):
            return None
        if PausedWorkflow.is_paused(execution.workflow_id):
            return None  # it keeps its place until its workflow is unpaused (workflows_app.pausing)
        message = (f"a slot of {execution.concurrency_key} is free: starting" if execution.concurrency_key
                   else "its deployment is free: starting")
        execution = execution_transition(execution, ExecutionStatus.PENDING, message=message)
        broker.send_advance_on_commit(execution)
    return execution


def start_next_when_ended(execution, source, target, event):
    """A reaction: an execution that ended (a queued one cancelled too) frees a slot, or a place,
    in each of its keys for their first queued ones."""
    if not execution.is_terminal:
        return
    if execution.concurrency_key:
        start_next(Key.of_workflow(execution.concurrency_key, execution.workflow_id))
    if execution.deployment_id:
        start_next(Key.of_deployment(execution.deployment_id))


def start_every_free_key():
    """The tick's safety net: every key with queued executions and a free slot (read in one
    query for the workflows' keys, one for the deployments) has its first ones tried."""
    active = Execution.objects.filter(status__in=EXECUTION_ACTIVE).order_by()
    counts = dict(admitted=Count("pk", filter=~Q(status=ExecutionStatus.QUEUED)),
                  queued=Count("pk", filter=Q(status=ExecutionStatus.QUEUED)))
    for row in (active.exclude(concurrency_key="").values("concurrency_key", "workflow_id")
                .annotate(**counts).filter(queued__gt=0)):
        limit = limit_of(row["workflow_id"])
        if limit is None or row["admitted"] < limit:
            start_next(Key.of_workflow(row["concurrency_key"], row["workflow_id"]))
    for deployment_id in (active.exclude(deployment_id=None).values("deployment_id").annotate(**counts)
                          .filter(queued__gt=0, admitted=0).values_list("deployment_id", flat=True)):
        start_next(Key.of_deployment(deployment_id))

