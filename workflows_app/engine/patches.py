"""Patch markers: ``ctx.patched(change_id)``'s answers, one per change id and execution.

A workflow whose code changes while executions of it run guards the change with
``if ctx.patched("change-id"):``. The answer is true for an execution that reaches the call
for the first time under the new code, false for one that had passed that point under the old
code — how a run tells the two apart is ``Replay.patched``'s (``engine.replay``). Once given,
the answer is stored in the execution's ``patches`` (change id -> true or false) in the pass'
transaction, and every later run of the function, replayed or live, gets the stored one.
"""

from workflows_app import values
from workflows_app.errors import ValueRefused
from workflows_app.models import Execution

#: The longest change id.
MAX_CHANGE_ID_LENGTH = 200


def check_change_id(change_id) -> str:
    """A change id is a string, not blank, of at most MAX_CHANGE_ID_LENGTH characters."""
    if not isinstance(change_id, str):
        raise TypeError(f"a change id is a string, not {type(change_id).__name__} ({change_id!r})")
    if not change_id.strip():
        raise ValueError(f"a change id names the change: not an empty or blank string ({change_id!r})")
    if len(change_id) > MAX_CHANGE_ID_LENGTH:
        raise ValueError(f"a change id has at most {MAX_CHANGE_ID_LENGTH} characters, not {len(change_id)}")
    problem = values.string_problem(change_id)
    if problem:
        raise ValueRefused("a change id", problem)
    return change_id


def stored(execution, change_id):
    """The answer stored for ``change_id`` in ``execution``, or None."""
    return (execution.patches or {}).get(change_id)


def store(execution, change_id, answer: bool) -> bool:
    """Store ``answer`` for ``change_id`` (in the caller's transaction, under the execution's
    lock); returns it."""
    execution.patches = {**(execution.patches or {}), change_id: bool(answer)}
    Execution.objects.filter(pk=execution.pk).update(patches=execution.patches)
    return bool(answer)
