"""The replay check: does today's code of a workflow replay an execution's exported history
(``engine.history``)? What ``manage.py replay_check`` runs on each file, before a deploy.

:func:`check` stores the history as a new execution in a transaction it rolls back, runs the
workflow function once over it as a pass would — through the engine's own ``Replay`` and
``live.Run``, without a live run — and reads what happened. The replay is one of a history
(``Replay(..., history_only=True)``): it stores, settles and sends nothing, and it stops where
the code asks for something the history does not hold. So nothing of the check is kept, no
message is sent (every send of a pass waits for its commit, and the check never commits), and
no event, timer or retry moves on meanwhile.

The history does not replay when today's code:

- asks for a stored step with another operation or other arguments (``NonDeterministicWorkflow``,
  as a pass would fail the execution);
- asks for something new — a step, a wait — while the history still holds steps or waits it
  has not reached: it takes another path than the one the execution took (guard such a change
  with ``ctx.patched``);
- returns, or raises, before reaching everything the history holds.

It does replay when the code reaches everything the history holds and then goes on — a new
step, a wait, a first ``ctx.patched`` answer (true), a return, an exception: that is what the
next pass of a running execution does with today's code — and when it waits on a step or wait
that the history holds as not done yet.
"""

from django.db import transaction

from workflows_app.engine import history, live
from workflows_app.engine.handles import Suspend
from workflows_app.engine.replay import PastHistory, Replay
from workflows_app.errors import RegistrationError
from workflows_app.registry import get_workflow

#: How many of the things a replay did not reach a verdict names (then "and N more").
SHOWN = 3
#: How much of the message of an exception the code raised a verdict quotes.
QUOTED = 300


def check(document) -> str | None:
    """None when today's code of the history's workflow replays ``document`` (a history as
    ``export_execution`` writes it, parsed from JSON); else why not, in one line, naming the
    step. ``HistoryRefused`` for a document that is not a history."""
    history.parse(document)
    workflow_id = document["execution"]["workflow_id"]
    try:
        definition = get_workflow(workflow_id)
    except RegistrationError as exc:
        return _line(f"today's code cannot run this history: {exc}")
    with transaction.atomic():
        execution, operations, waits = history.load(document)
        replay = Replay(execution, operations, stored_waits=waits, history_only=True)
        run = live.Run(replay, definition.func, dict(execution.parameters), live=False)
        try:
            raised = run.step()
        except Exception as exc:  # noqa: BLE001 — what the code raised is part of the verdict
            raised = exc
        behind = replay.unreached()
        transaction.set_rollback(True)  # nothing of the check is kept, and no on_commit runs
    return _verdict(replay, raised, behind)


def _verdict(replay, raised, behind):
    if replay.nondeterminism is not None:  # even if the code caught it
        return _line(str(replay.nondeterminism))
    past = replay.past_history or (raised if isinstance(raised, PastHistory) else None)
    if past is not None:
        if not past.behind:
            return None  # past the history's end: what the next pass of a running execution does
        return _line(f"non-deterministic workflow: this replay asked for {past.what}, which the history does not "
                     f"hold, before reaching {_named(past.behind)}: the code takes another path than the one this "
                     "execution took; guard the change with ctx.patched")
    if isinstance(raised, Suspend) or not behind:
        return None  # it waits on what the history holds as not done, or reached all of it
    if raised is None:
        return _line(f"non-deterministic workflow: the workflow function returned before reaching {_named(behind)}: "
                     "the code no longer asks for what this execution stored")
    message = " ".join(str(raised).split())
    quoted = message if len(message) <= QUOTED else message[:QUOTED] + "..."
    return _line(f"non-deterministic workflow: the workflow function raised {type(raised).__name__}"
                 f"{': ' + quoted if quoted else ''} before reaching {_named(behind)}: the code changed where "
                 "this execution had gone on")


def _named(things) -> str:
    """What a replay did not reach, as a verdict names it: the first few, then how many more."""
    shown = ", ".join(things[:SHOWN])
    more = len(things) - SHOWN
    return f"the history's {shown}" + (f" and {more} more" if more > 0 else "")


def _line(text) -> str:
    return " ".join(text.split())
