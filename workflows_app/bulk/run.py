"""Taking one action on many executions, each through the one-at-a-time service, and counting
what happened to them (``workflows_app.bulk``).

:func:`act` reads the executions a batch at a time — their id, status and workflow only, in id
order, each batch after the last id of the one before — and for each one:

- **skipped** when its status, as read in the batch, does not allow the action
  (``services.actions_for``): nothing is asked of it. "Cancel everything that matches" meets
  ended executions, and that is not a refusal;
- else the action is taken through ``services.ACTIONS[action]``, with its permission check and
  in its own transaction: **done**, or **refused** with why — ``permission`` (the user may not, on
  that execution's workflow), ``status`` (its status changed after the batch was read, to one
  that does not allow the action; counted by the status it has now) or ``gone`` (deleted
  meanwhile).

A dry run reads the same batches and decides the same way from what it reads, the permission
included, and takes no action: ``done`` is what would be done.

Key order rather than pages by offset: what a run acts on leaves its filter while the run goes on
(a cancel moves executions out of ``status=started``), and an offset would then skip some. Each
execution is met once, and each batch is one query over an index range, however large the
selection: memory holds one batch. An execution that comes to match while the run goes on is
taken if its id is after the batch being read.

Several executions are acted on at once (``WORKERS``, ``workflows_app.bulk.parallel``): each
action waits for the database much of its time, and ten thousand waits in a row would outlast a
web request. Each is still its service in its own transaction. The cancels those actions ask of
running steps are gathered (``broker.cancels_gathered``): a broadcast per few hundred
executions, not one each.

A broker that does not answer stops the run there: each further action would wait for it in
turn. ``Outcome.stopped`` says so, and the counts say what was done before; what that
execution's service had recorded is carried on by the managers once the broker answers, as for
one action alone. The same bulk action again takes the rest (and those done, where their new
status allows the action again: a resumed execution is ``started``, which resume allows).

Hazard: call it outside a transaction. Inside one (a project's ``ATOMIC_REQUESTS``, a test), the
actions are taken one at a time on the caller's connection, and commit only with it — each
execution's row lock held until then — and their messages to the broker are sent only then.
"""

import threading
from collections import Counter
from dataclasses import dataclass, field

from django.db import transaction
from kombu.exceptions import OperationalError as BrokerError

from workflows_app import broker, permissions, services
from workflows_app.bulk import parallel
from workflows_app.errors import ParameterError, PermissionRefused, TransitionRefused
from workflows_app.models import Execution

#: Executions read (as id, status and workflow) per batch.
BATCH_SIZE = 500
#: Executions acted on at once (threads, each with its own database connection).
WORKERS = 4


@dataclass
class Outcome:
    """What a bulk action did: every execution it met is counted once, as done, skipped (by its
    status) or refused (by why)."""

    action: str
    dry_run: bool = False
    done: int = 0
    skipped: Counter = field(default_factory=Counter)  # status -> executions
    refused_permission: int = 0
    refused_status: Counter = field(default_factory=Counter)  # status it had when refused -> executions
    gone: int = 0
    #: Why the run stopped before the end of the selection ("" when it did not).
    stopped: str = ""

    @property
    def refused(self) -> int:
        return self.refused_permission + sum(self.refused_status.values()) + self.gone

    @property
    def matched(self) -> int:
        """The executions met: all those the selection matched, unless the run stopped."""
        return self.done + sum(self.skipped.values()) + self.refused

    def as_dict(self) -> dict:
        """The answer of ``POST /executions/bulk`` and of the commands' ``--json``."""
        return {
            "action": self.action,
            "dry_run": self.dry_run,
            "matched": self.matched,
            "done": self.done,
            "skipped": {"count": sum(self.skipped.values()), "statuses": dict(sorted(self.skipped.items()))},
            "refused": {"count": self.refused, "permission": self.refused_permission,
                        "status": dict(sorted(self.refused_status.items())), "gone": self.gone},
            "stopped": self.stopped or None,
        }

    def count(self, refusal, pk=None) -> bool:
        """Count one execution the action was taken on (or, in a dry run, would be): done when
        ``refusal`` is None, else refused by it; False when it stopped the run (a broker error)."""
        if refusal is None:
            self.done += 1
        elif isinstance(refusal, PermissionRefused):
            self.refused_permission += 1
        elif isinstance(refusal, TransitionRefused) and getattr(refusal, "status_now", None) is not None:
            self.refused_status[refusal.status_now] += 1
        elif isinstance(refusal, (Execution.DoesNotExist, TransitionRefused)):
            self.gone += 1  # a refused transition of a row that is no longer there
        elif not self.stopped:
            where = f"at execution {pk}" if pk is not None else "as the last cancels were sent"
            self.stopped = (f"the message broker did not answer ({' '.join(str(refusal).split())[:200]}) {where}; "
                            "what was recorded is carried on once it answers; run the action again for the "
                            "executions not reached")
            return False
        return not self.stopped

    def why(self) -> str:
        """Why the refused ones were: ``permission 1; status: completed 2; gone 1``."""
        why = [f"permission {self.refused_permission:,}"] if self.refused_permission else []
        why += [f"status: {_statuses(self.refused_status)}"] if self.refused_status else []
        why += [f"gone {self.gone:,}"] if self.gone else []
        return "; ".join(why)

    def summary(self) -> str:
        """One line: ``cancel: 3 done, 1 skipped (completed 1), 0 refused, of 4 matching``."""
        done = "would be done" if self.dry_run else "done"
        parts = [f"{self.done:,} {done}", f"{sum(self.skipped.values()):,} skipped{_by_status(self.skipped)}"]
        parts.append(f"{self.refused:,} refused" + (f" ({self.why()})" if self.refused else ""))
        name = f"{self.action} (dry run)" if self.dry_run else self.action
        line = f"{name}: {', '.join(parts)}, of {self.matched:,} matching"
        return f"{line}; stopped: {self.stopped}" if self.stopped else line


def act(action, executions, *, user=None, dry_run=False, batch_size=None, workers=None) -> Outcome:
    """Take ``action`` (a key of ``services.ACTIONS``) on each of ``executions`` (a queryset of
    ``Execution``, any filter and order) for ``user`` (None: the server's own access, never
    refused) and count what happened; with ``dry_run``, count what would happen and do nothing.

    A user who may not take the action at all (``workflows_app.permissions``: on no workflow) is
    refused the whole of it at once (``PermissionRefused``), before anything is read; one who
    may on some workflows and not others has the others counted as refused. ``batch_size``:
    executions read per batch (default :data:`BATCH_SIZE`). ``workers``: executions acted on at
    once, each on a connection of its own (default :data:`WORKERS`; ``workflows_app.bulk.parallel``),
    but one at a time when called inside a transaction. Raises ``ParameterError`` for an action
    that is none of ``services.ACTIONS``."""
    if action not in services.ACTIONS:
        raise ParameterError(f"unknown action {str(action)[:100]!r}: one of {', '.join(services.ACTIONS)}")
    batch_size = BATCH_SIZE if batch_size is None else batch_size
    workers = WORKERS if workers is None else workers
    if batch_size < 1 or workers < 1:
        raise ValueError(f"batch_size and workers must be 1 or more, not {batch_size} and {workers}")
    permissions.check(user, action)
    take = services.ACTIONS[action]
    outcome = Outcome(action, dry_run=dry_run)
    wanted = _allowed(action, executions, batch_size, outcome)
    if dry_run:
        for _, workflow_id in wanted:
            outcome.count(None if permissions.allows(user, action, workflow_id) else PermissionRefused())
    else:
        try:
            _take_each(take, wanted, user, outcome, workers, transaction.get_connection(executions.db).in_atomic_block)
        except BrokerError as exc:  # the broadcast of the last cancels gathered, as the run ended
            outcome.count(exc)
    return outcome


def _take_each(take, wanted, user, outcome, workers, in_transaction):
    """Take the action on each of ``wanted`` and count it: one at a time, or several at once
    (``parallel``); either way, the cancels that ask running steps to stop gathered in a few
    broadcasts (``broker.cancels_gathered``)."""
    if workers == 1 or in_transaction:
        # In a transaction, what the caller wrote and locked is its connection's: another would
        # not see the one and would wait on the other.
        with broker.cancels_gathered():
            for pk, _ in wanted:
                if not outcome.count(_take(take, pk, user), pk):
                    break
        return
    lock = threading.Lock()

    def take_one(item):
        refusal = _take(take, item[0], user)
        with lock:
            return outcome.count(refusal, item[0])

    parallel.each(take_one, wanted, workers, around=broker.cancels_gathered)


def batches(executions, size):
    """``executions`` as lists of at most ``size`` ``(id, status, workflow_id)``, in id order,
    one query each: each batch starts after the last id of the one before."""
    rows = executions.order_by("pk").values_list("pk", "status", "workflow_id")
    last = None
    while True:
        batch = list((rows if last is None else rows.filter(pk__gt=last))[:size])
        if batch:
            yield batch
        if len(batch) < size:
            return
        last = batch[-1][0]


def _allowed(action, executions, batch_size, outcome):
    """``(id, workflow_id)`` of each execution whose status, as read, allows ``action``; the
    others are counted skipped."""
    allows = _allows(action)
    for batch in batches(executions, batch_size):
        for pk, status, workflow_id in batch:
            if allows(status):
                yield pk, workflow_id
            else:
                outcome.skipped[status] += 1


def _take(take, pk, user):
    """Take the action on one execution: None when done, else what refused it or stopped it
    (``Execution.DoesNotExist``, ``PermissionRefused``, ``TransitionRefused`` with the status it
    has now as ``status_now``, ``BrokerError``)."""
    try:
        take(pk, user=user)
    except (PermissionRefused, Execution.DoesNotExist, BrokerError) as refusal:
        return refusal
    except TransitionRefused as refusal:
        refusal.status_now = Execution.objects.filter(pk=pk).values_list("status", flat=True).first()
        return refusal
    return None


def _allows(action):
    """Whether an execution in a status allows ``action`` (``services.actions_for``), each
    status asked once."""
    known = {}

    def allows(status):
        if status not in known:
            known[status] = action in services.actions_for(status)
        return known[status]

    return allows


def _by_status(counts) -> str:
    return f" ({_statuses(counts)})" if counts else ""


def _statuses(counts) -> str:
    return ", ".join(f"{status} {n:,}" for status, n in sorted(counts.items()))
