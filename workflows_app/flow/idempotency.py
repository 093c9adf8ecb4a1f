"""Idempotent starts: a start that carries an idempotency key starts its execution once.

A key is its owner's — a user's (by pk), or the server's own (``""``: starts by code or a command,
``user=None``) — so two users' keys never meet: one user's request with a key is a request of its
own whatever another user sent with the same key, and learns nothing of it. For
``WORKFLOWS["IDEMPOTENCY_SECONDS"]`` after the first start with it, a key answers:

* the same request again (the same :func:`fingerprint`): the execution that start started — a
  *replay*, nothing is started;
* another request: :class:`IdempotencyConflict`, nothing is started.

After that it has expired and answers nothing: a start with it starts anew and takes it over.

**One execution, however many at once.** The key is stored (:class:`~workflows_app.models.
IdempotencyKey`, unique per owner and key) by :func:`take`, in the transaction that stores the
execution, before the execution: of two starts with one key, on any number of processes, the
database lets one insert it; the other's insert waits for that transaction and fails once it
commits (or goes ahead, if it rolled back), and that start answers with the row the winner
committed — the winner's execution, or a conflict. No check-then-insert: :func:`earlier`, the
look before a start, only spares a replay the start's work; what decides is the constraint.

A start that is refused (an invalid request, a busy deployment) stores nothing, not its key
either: the same key may be sent again once the request can be taken. An execution that is
deleted (purged, or deleted in the admin) takes its key with it, so a key never answers an
execution that no longer exists: the same request then starts a new execution. Expired keys are
deleted by the purge (``workflows_app.retention``).

Schedules and child executions have their own deduplication (a slot starts once; a child is a
step of its parent) and take no key.
"""

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from django.db import IntegrityError, transaction

from workflows_app import clock, values
from workflows_app.conf import workflows_settings
from workflows_app.errors import ParameterError, SwitchyardError, ValueRefused
from workflows_app.models import Execution, IdempotencyKey

#: The longest key taken (the column's).
MAX_KEY = IdempotencyKey._meta.get_field("key").max_length
#: How many times a start whose key another start inserted first looks for that start's row and,
#: not finding it (deleted meanwhile, with its execution), tries to insert the key again.
ATTEMPTS = 3


class IdempotencyConflict(SwitchyardError):
    """A start with an idempotency key its owner already used, unexpired, for another request
    (other workflow, parameters or options): nothing was started. ``execution_id``: the
    execution the key started (the owner's own)."""

    def __init__(self, key="", execution_id=None):
        super().__init__(key, execution_id)
        self.key, self.execution_id = key, execution_id

    def __str__(self):
        return (f"the idempotency key {values.shown_name(self.key)} was already used for another request (it "
                f"started execution {self.execution_id}): send that request again to get that execution, or use "
                f"a new key for a new request")


@dataclass(frozen=True)
class Claim:
    """What a start with a key asks: its ``owner``'s ``key``, for a request of this ``fingerprint``."""

    owner: str
    key: str
    fingerprint: str


def key_problem(key) -> str | None:
    """Why ``key`` cannot be an idempotency key, or None: a string of 1 to :data:`MAX_KEY`
    characters that can be stored (``values.string_problem``) and has no control character."""
    if not isinstance(key, str):
        return f"a string, not {type(key).__name__}"
    if not key:
        return "may not be empty"
    if len(key) > MAX_KEY:
        return f"at most {MAX_KEY} characters, not {len(key)}"
    problem = values.string_problem(key)
    if problem is not None:
        return problem
    if any(ord(character) < 0x20 or 0x7f <= ord(character) <= 0x9f for character in key):
        return "control characters are not allowed"
    return None


def check_key(key) -> str:
    """``key`` if it can be an idempotency key; else ``ValueRefused`` (a ``ParameterError``)."""
    problem = key_problem(key)
    if problem is not None:
        raise ValueRefused("idempotency_key", problem)
    return key


def owner_of(user) -> str:
    """Whose keys a start's are: the user's pk as text; ``""`` for the server's own (no user)."""
    return "" if user is None or user.pk is None else str(user.pk)


def fingerprint(request: dict) -> str:
    """The sha256 (hex) of the canonical JSON of ``request`` (what defines a start: its workflow,
    parameters and options, as given): sorted keys, compact, ASCII; a date-time in UTC. Two
    requests are the same request when their fingerprints are equal. ``ParameterError`` for a
    value that is not JSON."""
    try:
        text = json.dumps(request, ensure_ascii=True, allow_nan=False, default=_json_default)
        # Once more with sorted keys, from JSON: its keys are all strings now (a parameter's key
        # may be a number, which could not be sorted among strings).
        text = json.dumps(json.loads(text), ensure_ascii=True, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"the request cannot be compared with another: {values.clean_text(exc, 200)}") from None
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _json_default(value):
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).isoformat() if value.tzinfo else value.isoformat()
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def claim_for(user, key, request: dict) -> Claim | None:
    """The claim of a start of ``user`` with ``key`` (checked: :func:`check_key`) for ``request``
    (:func:`fingerprint`); None without a key."""
    if key is None:
        return None
    return Claim(owner_of(user), check_key(key), fingerprint(request))


def earlier(claim: Claim) -> Execution | None:
    """The execution an earlier start with the claim's key started, unexpired, for the same
    request (a replay); None when there is none; ``IdempotencyConflict`` when it was for another
    request. A look only: what decides is :func:`take`, in the start's transaction."""
    row = _unexpired(claim, clock.now())
    return None if row is None else _answer(claim, row)


def take(claim: Claim, execution: Execution) -> Execution | None:
    """Store the claim's key for ``execution`` — an unsaved execution that the caller stores in the
    same transaction, which this must be called in — and return None; or, when another start
    took the key first, return that start's execution (a replay; this start must not store
    ``execution``) or raise ``IdempotencyConflict``. An expired row of the key is replaced.

    The insert is what decides (see the module's docstring): when another transaction inserted
    the key and has not committed, it waits for it."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("take() stores the key in the start's transaction: call it in transaction.atomic()")
    for attempt in range(ATTEMPTS):
        now = clock.now()
        IdempotencyKey.objects.filter(owner=claim.owner, key=claim.key, expires_at__lte=now).delete()
        try:
            with transaction.atomic():  # a savepoint: the refused insert must not abort the start's transaction
                # By id: the execution is stored after the key, in this transaction (the foreign
                # key is checked at the commit).
                IdempotencyKey.objects.create(
                    owner=claim.owner, key=claim.key, fingerprint=claim.fingerprint, execution_id=execution.pk,
                    created_at=now, expires_at=now + timedelta(seconds=workflows_settings.IDEMPOTENCY_SECONDS))
            return None
        except IntegrityError:
            if attempt == ATTEMPTS - 1:
                raise
        # Another start inserted it and committed: its row (a new statement, which sees that commit).
        row = _unexpired(claim, now)
        if row is not None:
            return _answer(claim, row)
    raise AssertionError("unreachable")


def _unexpired(claim, now) -> IdempotencyKey | None:
    return (IdempotencyKey.objects.select_related("execution")
            .filter(owner=claim.owner, key=claim.key, expires_at__gt=now).first())


def _answer(claim, row) -> Execution:
    if row.fingerprint != claim.fingerprint:
        raise IdempotencyConflict(claim.key, row.execution_id)
    return row.execution


def purge_expired(now=None) -> int:
    """Delete the keys expired by ``now`` (by default the engine's now): one DELETE, on the index
    of ``expires_at``. Returns how many."""
    deleted, _ = IdempotencyKey.objects.filter(expires_at__lte=now or clock.now()).delete()
    return deleted


def forget(execution_ids) -> int:
    """Delete the keys of the executions ``execution_ids``, which the caller deletes in the same
    transaction (retention deletes executions without Django's collector). Returns how many."""
    deleted, _ = IdempotencyKey.objects.filter(execution_id__in=execution_ids).delete()
    return deleted
