"""Retention: deleting ended executions with everything that is theirs — operations
and the edges between them, events, waits — and their child executions.

There is one way to delete executions, :func:`_delete`, reached three ways:

* :func:`purge` — ``manage.py purge_executions`` and the managers' daily purge
  (``WORKFLOWS["RETENTION_DAYS"]``): the top-level executions ended before a cutoff;
* :func:`delete_executions` — the admin's delete: the ended executions an operator chose;
* :func:`discard` — a benchmark's own rows, whatever their status, once nothing runs them.

**Idempotency keys.** An execution's key (``workflows_app.flow.idempotency``) goes with it; a
purge also deletes every key that has expired, whether or not it deletes an execution.

**Trees.** A child execution goes with its parent (``Execution.parent``, CASCADE), never on its
own in a purge: a purge chooses top-level executions, and deletes each with its descendants
only when every execution of the tree has ended — before the cutoff too: one that was resumed
and ended later keeps its tree until it is old enough as well. So no active execution is ever
deleted, nor one with an active ancestor. An ended execution without ``ended_at`` (a row not
written by the engine, which always sets it) counts from its ``created_at``.

**Batches.** Each batch is its own transaction: up to ``BATCH_SIZE`` chosen executions (a
purge reads them oldest end first, on the index of ``ended_at``; keyset paging, so a row left
alone is read once), each with its descendants. Their rows are deleted by ``execution_id IN
(…)``; nothing is loaded into memory but ids. A batch lasts as long as deleting its rows takes
(an execution with a million events makes its batch that much longer).

**Locks.** No table lock, ever. A batch locks only the executions it deletes, all ended: the
chosen ones by id, ``SELECT … FOR UPDATE SKIP LOCKED`` re-checking that they are still chosen
(ended, and before the cutoff), then their descendants — and the ended ancestors of a chosen
child (:func:`delete_executions`) — the same way: one resumed meanwhile is not locked, and
keeps its whole tree. An active execution is never selected for update, updated or deleted,
so nothing of it ever waits for a purge. On SQLite, which has no row locks, a batch is one
write transaction (``BEGIN IMMEDIATE``, as :mod:`workflows_app.db` sets SQLite up): every other
writer waits for it, and the purge pauses after each batch to let them in (``SQLITE_PAUSE_SECONDS``).

**Several purges at once** (every manager purges daily; an operator may run the command too):
``SKIP LOCKED`` gives each batch executions no other batch holds, so concurrent purges share
the work instead of waiting for or deadlocking on each other; each counts only the rows it
deleted (the row counts of its own DELETEs), so their counts add up to what went.

**Fast deletes.** Waits, the operations' dependency rows and the idempotency keys that started
the executions are deleted with ``QuerySet.delete()``, which Django's collector turns into one
DELETE (no model has a relation to them, and no delete signal is connected). Events and
operations cannot be: a wait's ``event`` (SET_NULL) and the dependency rows (CASCADE) point at
them, so the collector would first load every one of them — a million events into memory — to
follow those relations. Their dependents are deleted first in the same transaction (a wait only ever takes an event of
its own execution, engine.waits), so they go by ``_raw_delete`` — one ``DELETE … WHERE
execution_id IN (…)``, which is what the collector would end with — as do the executions
themselves. The database's foreign keys (deferred to the commit) still check that nothing is
left pointing at them.
"""

import math
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from workflows_app.flow import idempotency
from workflows_app.models import Event, Execution, Operation, OperationDependency, ScheduleSlot, Wait
from workflows_app.states import EXECUTION_ACTIVE, EXECUTION_TERMINAL

#: Chosen executions (each with its descendants) per batch, one transaction each.
BATCH_SIZE = 500
#: SQLite has one writer at a time and no queue for the lock: a writer kept waiting polls for it,
#: at most 100 ms apart (SQLite's busy handler), and would rarely find it free between two
#: batches. The pause after each batch is longer than that, so every writer that waited gets in.
SQLITE_PAUSE_SECONDS = 0.11
#: Ids per ``IN (…)`` list: SQLite refuses a statement of more than 32,766 parameters, and a
#: tree can be larger than that.
IN_CHUNK = 500

#: :func:`discard` passes over the rows another transaction held, and the pause between them.
DISCARD_PASSES = 50
DISCARD_PAUSE_SECONDS = 0.1


@dataclass
class Counts:
    """What a purge or a delete removed (a dry run: would remove)."""

    executions: int = 0
    operations: int = 0
    events: int = 0
    #: Chosen executions left alone: one of their tree still active (or ended after the cutoff),
    #: an active ancestor, or a row another transaction held at that moment.
    kept: int = 0

    def add(self, other: "Counts"):
        self.executions += other.executions
        self.operations += other.operations
        self.events += other.events
        self.kept += other.kept

    def as_dict(self) -> dict:
        return asdict(self)


def cutoff(older_than_days, now=None) -> datetime:
    """The moment ``older_than_days`` days before ``now``; a ValueError unless a finite number >= 0."""
    if isinstance(older_than_days, bool) or not isinstance(older_than_days, (int, float)) or not (
            math.isfinite(older_than_days) and older_than_days >= 0):
        raise ValueError(f"a number of days >= 0, not {older_than_days!r}")
    return (now or timezone.now()) - timedelta(days=older_than_days)


def terminal_statuses(statuses=None) -> frozenset:
    """``statuses`` (all terminal ones if none); a ValueError naming any that is not terminal."""
    if not statuses:
        return EXECUTION_TERMINAL
    wrong = [status for status in statuses if status not in EXECUTION_TERMINAL]
    if wrong:
        raise ValueError(f"not a status an ended execution has: {', '.join(map(str, wrong))} "
                         f"(one of {', '.join(sorted(EXECUTION_TERMINAL))})")
    return frozenset(statuses)


def purge(older_than_days, statuses=None, *, dry_run=False, now=None, progress=None, guard=nullcontext) -> Counts:
    """Delete the top-level executions that ended more than ``older_than_days`` days ago (only
    those in ``statuses``, terminal ones, if given), each with its descendants, in batches, the
    oldest first.

    ``dry_run``: count, delete nothing. ``progress(counts, examined, total)`` is called after
    each batch (``examined`` of ``total`` executions looked at). ``guard()`` is entered around
    each batch (a manager's: no fork of its process meanwhile).

    Then the idempotency keys of starts that expired by ``now`` are deleted too, whether or not
    an execution was (``workflows_app.flow.idempotency``): one DELETE on their expiry's index."""
    before = cutoff(older_than_days, now)
    statuses = terminal_statuses(statuses)
    chosen = Execution.objects.filter(status__in=statuses).filter(ended_before(before))
    counts = _in_batches(_EndedPages(statuses, before), chosen, _Rules(cutoff=before), dry_run, progress, guard)
    if not dry_run:
        with guard():
            idempotency.purge_expired(now)
    return counts


def delete_executions(executions, *, dry_run=False, progress=None, guard=nullcontext) -> Counts:
    """Delete ``executions`` (a queryset or ids) that have ended, each with its descendants,
    unless one of its descendants is still active or one of its ancestors is; in batches."""
    ids = executions.values("pk") if hasattr(executions, "values") else list(executions)
    chosen = Execution.objects.filter(status__in=EXECUTION_TERMINAL)
    return _in_batches(_Pages(chosen.filter(pk__in=ids)), chosen, _Rules(ancestors=True), dry_run, progress, guard)


def discard(executions, *, progress=None) -> Counts:
    """Delete ``executions`` (a queryset) and their descendants whatever their status: only for
    rows nothing runs — a benchmark's own, once its manager stopped. Everything else is deleted
    by :func:`purge` or :func:`delete_executions`, which never touch an active execution.

    A row another transaction holds (a manager's tick sharing the database looking at it) is
    skipped by a pass and taken by the next: passes go on, ``DISCARD_PAUSE_SECONDS`` apart, while
    one still keeps a row, up to ``DISCARD_PASSES``."""
    counts = Counts()
    for _ in range(DISCARD_PASSES):
        counts.add(_in_batches(_Pages(executions), Execution.objects.all(), _Rules(any_status=True), False, progress,
                               nullcontext))
        if not executions.exists():
            break
        time.sleep(DISCARD_PAUSE_SECONDS)
    counts.kept = executions.count()
    return counts


def deletable(executions) -> set:
    """The ids of ``executions`` (a queryset or ids) that :func:`delete_executions` would delete
    now: ended, with no active ancestor and no active descendant. A query per level of the trees."""
    ids = executions.values("pk") if hasattr(executions, "values") else list(executions)
    chosen = list(Execution.objects.filter(pk__in=ids, status__in=EXECUTION_TERMINAL).order_by()
                  .values_list("pk", "parent_id"))
    tree = _Tree.of(chosen)
    blocked = tree.blocked_by_descendants(_Rules(ancestors=True)) | tree.blocked_by_ancestors()
    return {pk for pk, _ in chosen if pk not in blocked}


def ended_before(moment) -> Q:
    """Ended before ``moment``; an ended row without ``ended_at`` counts from its ``created_at``."""
    return Q(ended_at__lt=moment) | Q(ended_at__isnull=True, created_at__lt=moment)


# --- the batches -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rules:
    """What a tree must be to go: every execution of it ended (``any_status``: whatever it is),
    and before ``cutoff`` when there is one; with ``ancestors``, the chosen may be children,
    and none of their ancestors may be active."""

    cutoff: datetime | None = None
    ancestors: bool = False
    any_status: bool = False

    def allows(self, status, ended_at, created_at) -> bool:
        if self.any_status:
            return True
        return status in EXECUTION_TERMINAL and (self.cutoff is None or (ended_at or created_at) < self.cutoff)


class _Pages:
    """The executions of a queryset, ``BATCH_SIZE`` at a time in the order of their id (keyset:
    each page starts after the last one's end, so a row left alone is read once)."""

    def __init__(self, executions):
        self.executions, self.after = executions, None

    def total(self) -> int:
        return self.executions.count()

    def next(self) -> tuple[int, list]:
        """(rows read, their (id, parent id) pairs that are candidates); (0, []) at the end."""
        page = self.executions.order_by("pk")
        if self.after is not None:
            page = page.filter(pk__gt=self.after)
        rows = list(page.values_list("pk", "parent_id")[:BATCH_SIZE])
        if rows:
            self.after = rows[-1][0]
        return len(rows), rows


class _EndedPages:
    """A purge's pages: the executions in ``statuses`` that ended before ``cutoff``, in the order
    they ended (a range of the index on ``ended_at``; keyset on ``ended_at`` then id), then those
    without ``ended_at`` created before it (by id). Only top-level ones are candidates; a child
    goes with its top-level execution. The page's query says nothing of ``parent``: SQLite's
    planner takes ``parent_id IS NULL`` for a selective condition and would sort the whole table
    on every page to serve it."""

    def __init__(self, statuses, cutoff):
        self.dated = Execution.objects.filter(status__in=statuses, ended_at__lt=cutoff)
        self.undated = _Pages(Execution.objects.filter(status__in=statuses, ended_at__isnull=True, created_at__lt=cutoff))
        self.after = None  # (ended_at, id) of the last dated row read; "undated" once they are all read

    def total(self) -> int:
        return self.dated.count() + self.undated.total()

    def next(self) -> tuple[int, list]:
        if self.after != "undated":
            page = self.dated
            if self.after is not None:
                ended_at, pk = self.after
                page = page.filter(ended_at__gte=ended_at).exclude(ended_at=ended_at, pk__lte=pk)
            rows = list(page.order_by("ended_at", "pk").values_list("pk", "parent_id", "ended_at")[:BATCH_SIZE])
            if rows:
                self.after = rows[-1][2], rows[-1][0]
                return len(rows), [(pk, parent) for pk, parent, _ in rows if parent is None]
            self.after = "undated"
        read, rows = self.undated.next()
        return read, [(pk, parent) for pk, parent in rows if parent is None]


def _in_batches(pages, chosen, rules, dry_run, progress, guard) -> Counts:
    """Delete (count, with ``dry_run``) the candidates of ``pages`` that are still ``chosen`` and
    their descendants, a batch per page, each batch in a transaction of its own."""
    total = pages.total() if progress else None
    counts, examined = Counts(), 0
    while True:
        with guard():
            if dry_run:
                read, done = _batch(pages, chosen, rules, dry_run=True)
            else:
                with transaction.atomic():
                    read, done = _batch(pages, chosen, rules, dry_run=False)
        if not read:
            return counts
        examined += read
        counts.add(done)
        if progress:
            progress(counts, examined, total)
        if not dry_run and read == BATCH_SIZE and connection.vendor == "sqlite":  # a short page was the last
            time.sleep(SQLITE_PAUSE_SECONDS)


def _batch(pages, chosen, rules, dry_run) -> tuple[int, Counts]:
    """The next page's candidates — locked, unless ``dry_run``, if they are still ``chosen`` —
    deleted (counted, with ``dry_run``) with their descendants; returns how many rows the page read."""
    read, rows = pages.next()
    if not rows:
        return read, Counts()
    if not dry_run:
        # Checked again as they are locked (by id: a plan the planner cannot get wrong). One
        # another transaction holds — another purge's, a resume — is skipped: not waited for.
        locked = set(chosen.filter(pk__in=[pk for pk, _ in rows]).order_by().select_for_update(skip_locked=True)
                     .values_list("pk", flat=True))
        rows = [(pk, parent) for pk, parent in rows if pk in locked]
    tree = _Tree.of(rows)
    blocked = tree.blocked_by_descendants(rules)
    if rules.ancestors:
        blocked |= tree.blocked_by_ancestors()
    if not dry_run:
        # Their descendants (and a chosen child's ancestors), locked as they are checked once
        # more: one another transaction holds or that is active now keeps the whole tree.
        wanted = [pk for pk in tree.below if tree.top(pk) not in blocked]
        wanted += [pk for top, above in tree.above.items() if top not in blocked for pk in above]
        locked = _lock(wanted, rules)
        blocked |= {tree.top(pk) for pk in tree.below if pk not in locked and tree.top(pk) not in blocked}
        blocked |= {top for top, above in tree.above.items() if not above <= locked}
    ids = [pk for pk in tree.members if tree.top(pk) not in blocked]
    done = _count(ids) if dry_run else _delete(ids)
    done.kept = len(blocked)
    return read, done


class _Tree:
    """The chosen executions of a batch with their descendants (``below``: id -> parent id) and,
    for a chosen child, its ancestors (``above``: top chosen id -> their ids), read a level at
    a time. A chosen execution below another chosen one belongs to that one's tree."""

    def __init__(self, rows):
        self.parent = dict(rows)
        self.below = {}
        self.rows = {}
        self.above = {}

    @classmethod
    def of(cls, rows):
        tree = cls(rows)
        tree._read_descendants()
        return tree

    @property
    def members(self):
        return [*self.parent, *(pk for pk in self.below if pk not in self.parent)]

    def top(self, pk):
        """The chosen execution whose tree ``pk`` is in."""
        while True:
            parent = self.below.get(pk, self.parent.get(pk))
            if parent is None or (parent not in self.parent and parent not in self.below):
                return pk
            pk = parent

    def _read_descendants(self):
        level, seen = list(self.parent), set(self.parent)
        while level:
            found = []
            for chunk in _chunks(level):
                found += Execution.objects.filter(parent_id__in=chunk).order_by().values_list(
                    "pk", "parent_id", "status", "ended_at", "created_at")
            level = []
            for pk, parent, status, ended_at, created_at in found:
                self.rows[pk] = (status, ended_at, created_at)
                if pk not in self.parent:
                    self.below[pk] = parent
                if pk not in seen:
                    seen.add(pk)
                    level.append(pk)

    def blocked_by_descendants(self, rules) -> set:
        """The chosen executions whose tree has one the rules do not allow."""
        return {self.top(pk) for pk, (status, ended_at, created_at) in self.rows.items()
                if not rules.allows(status, ended_at, created_at)}

    def blocked_by_ancestors(self) -> set:
        """The chosen executions with an active ancestor; the others' ancestors in ``above``."""
        starts = {top: self.parent[top] for top in self.parent if self.top(top) == top and self.parent[top] is not None}
        chain = {top: set() for top in starts}
        level = dict(starts)  # top -> the ancestor to read next
        statuses = {}
        while level:
            wanted = [pk for pk in set(level.values()) if pk not in statuses]
            for chunk in _chunks(wanted):
                read = Execution.objects.filter(pk__in=chunk).order_by().values_list("pk", "parent_id", "status")
                statuses.update((pk, (status, parent)) for pk, parent, status in read)
            following = {}
            for top, pk in level.items():
                if pk not in statuses:  # deleted meanwhile: so is the chosen one, by CASCADE
                    continue
                chain[top].add(pk)
                if statuses[pk][1] is not None:
                    following[top] = statuses[pk][1]
            level = following
        self.above = chain
        return {top for top, ancestors in chain.items()
                if any(statuses[pk][0] in EXECUTION_ACTIVE for pk in ancestors if pk in statuses)}


def _lock(ids, rules) -> set:
    """Lock the executions ``ids`` that are still ended (any, with ``any_status``), skipping
    those another transaction holds; returns the ids locked. Never an active one."""
    locked = set()
    for chunk in _chunks(ids):
        rows = Execution.objects.filter(pk__in=chunk)
        if not rules.any_status:
            rows = rows.filter(status__in=EXECUTION_TERMINAL)
        locked.update(rows.order_by().select_for_update(skip_locked=True).values_list("pk", flat=True))
    return locked


def _delete(ids) -> Counts:
    """Delete the executions ``ids`` (whole trees) and every row of theirs, in the caller's
    transaction; returns the rows deleted (this transaction's own DELETEs: a row another purge
    deleted first is not counted twice)."""
    counts = Counts()
    for chunk in _chunks(ids):
        operations = Operation.objects.filter(execution_id__in=chunk)
        # Edges join operations of one execution (engine.graph): those from its operations are all.
        OperationDependency.objects.filter(operation_id__in=operations.values("pk")).delete()
        Wait.objects.filter(execution_id__in=chunk).delete()
        idempotency.forget(chunk)  # the keys that started them: no key answers an execution that is gone
        # A schedule's history keeps its slots; the executions they started are gone (SET_NULL,
        # which a raw DELETE does not do for them).
        ScheduleSlot.objects.filter(execution_id__in=chunk).update(execution=None)
        events = Event.objects.filter(execution_id__in=chunk)
        counts.events += events._raw_delete(events.db)
        counts.operations += operations._raw_delete(operations.db)
    for chunk in _chunks(ids):
        executions = Execution.objects.filter(pk__in=chunk)
        counts.executions += executions._raw_delete(executions.db)
    return counts


def _count(ids) -> Counts:
    counts = Counts()
    for chunk in _chunks(ids):
        counts.executions += len(chunk)
        counts.operations += Operation.objects.filter(execution_id__in=chunk).count()
        counts.events += Event.objects.filter(execution_id__in=chunk).count()
    return counts


def _chunks(ids):
    ids = list(ids)
    for start in range(0, len(ids), IN_CHUNK):
        yield ids[start:start + IN_CHUNK]
