"""What a workflow holds while it waits: handles of steps and of stored waits, and the
combinators ``all_of`` / ``any_of`` / ``none_of`` over them.

A handle reads the state its pass loaded; it never queries. ``wait()`` returns, raises the
step's failure, or *suspends* the workflow when the step is not done
(``Replay.suspend``, ``engine.replay``): the dispatcher then commits what the pass stored. Replay ends
the pass with ``Suspend``; a live run (``engine.live``) looks again when its next pass resumes
it — a wait handle settles its stored wait again first (``refresh``).

When a wait shows the workflow code a failed step (it raises ``StepFailed``, or ``any_of`` /
``none_of`` answer over it), the run notes that the code has seen that failure
(``Replay.saw``): if the code goes on, the failure is handled.
"""

from workflows_app.engine import waits
from workflows_app.errors import EventTimeout, StepFailed
from workflows_app.states import OPERATION_ENDED_BADLY, OperationState, WaitOutcome



class Suspend(BaseException):
    """The workflow needs a step that is not done yet. A BaseException, so that a workflow's
    own ``except Exception`` cannot swallow it."""


class _Handle:
    def refresh(self):
        """After a live run resumed: nothing to do for a step (the pass read its row again)."""


class StepHandle(_Handle):
    """A step started by ``ctx.execute`` (or a graph node): ``wait()``, ``result()``, ``state``."""

    def __init__(self, replay, name):
        self._replay, self.name = replay, name

    @property
    def _operation(self):
        return self._replay.operations[self.name]

    @property
    def state(self):
        return OperationState(self._operation.state)

    @property
    def done(self):
        return self._operation.is_terminal

    def wait(self):
        """The step's result; suspends the workflow until it is done; ``StepFailed`` if it failed."""
        while True:
            operation = self._operation
            if operation.state == OperationState.SUCCEEDED:
                self._replay.awaited([self.name])
                return operation.result
            if operation.state in OPERATION_ENDED_BADLY:
                raise self._replay.step_failed([operation])
            self._replay.suspend(self.name)

    result = wait

    def cancel(self):
        """``ctx.cancel_step(self)``: True if the step was cancelled now, False if it had ended."""
        return self._replay.cancel_step(self)

    def __repr__(self):
        return f"<StepHandle {self.name} {self._operation.state}>"


#: A wait's outcome as the state of a step, so that all_of / any_of / none_of mix both.
_WAIT_STATE = {
    WaitOutcome.WAITING: OperationState.STARTED,
    WaitOutcome.RECEIVED: OperationState.SUCCEEDED,
    WaitOutcome.ELAPSED: OperationState.SUCCEEDED,
    WaitOutcome.TIMED_OUT: OperationState.FAILED,
    WaitOutcome.CANCELLED: OperationState.CANCELLED,
}


class WaitHandle(_Handle):
    """A stored wait (``ctx.wait_for_event``; ``ctx.sleep`` uses one too), with a StepHandle's
    interface: ``wait()``, ``result()``, ``state``, ``done``, ``cancel()``.

    ``wait()`` returns the event's payload (``None`` for a sleep), raises ``EventTimeout`` once
    the wait timed out and ``StepFailed`` once it was cancelled, and otherwise suspends the
    workflow. ``state`` is an ``OperationState``: ``started`` while waiting, ``succeeded``,
    ``failed`` (timed out) or ``cancelled``."""

    def __init__(self, replay, key):
        self._replay, self.name = replay, key

    @property
    def _wait(self):
        return self._replay.stored_wait(self.name)

    def refresh(self):
        waits.settle(self._wait)

    @property
    def outcome(self):
        return WaitOutcome(self._wait.outcome)

    @property
    def state(self):
        return _WAIT_STATE[self.outcome]

    @property
    def done(self):
        return self.outcome != WaitOutcome.WAITING

    def wait(self):
        while True:
            wait = self._wait
            if wait.outcome in (WaitOutcome.RECEIVED, WaitOutcome.ELAPSED):
                return wait.payload
            if wait.outcome == WaitOutcome.TIMED_OUT:
                raise EventTimeout(wait.name, wait.timeout)
            if wait.outcome == WaitOutcome.CANCELLED:
                raise StepFailed(self.name, {"type": "Cancelled", "message": "the wait was cancelled"})
            self._replay.suspend(self.name, [self])

    result = wait

    def cancel(self):
        """``ctx.cancel_step(self)``: True if the wait was cancelled now, False if it had ended."""
        return self._replay.cancel_wait(self.name)

    def __repr__(self):
        return f"<WaitHandle {self.name} {self._wait.outcome}>"


def _failed_steps(handles):
    return [h._operation for h in handles if isinstance(h, StepHandle) and h.state in OPERATION_ENDED_BADLY]


def _ended_steps(handles):
    """The names of the steps among ``handles`` that have ended (what the code now knows of)."""
    return [h.name for h in handles if isinstance(h, StepHandle) and h.done]


class AllOf:
    """``ctx.all_of(*handles)``: ``wait()`` is the list of their results; a failure anywhere
    fails the whole at once, before the rest has ended."""

    def __init__(self, replay, handles):
        self._replay, self.handles = replay, handles

    def wait(self):
        while True:
            failed = _failed_steps(self.handles)
            if failed:
                raise self._replay.step_failed(failed)
            for handle in self.handles:  # a wait that timed out or was cancelled raises its own error
                if handle.state in OPERATION_ENDED_BADLY:
                    handle.wait()
            if all(handle.done for handle in self.handles):
                return [handle.wait() for handle in self.handles]
            self._replay.suspend("all_of", self.handles)

    result = wait


class AnyOf:
    """``ctx.any_of(*handles)``: ``wait()`` is the result of the first that succeeded (in the
    given order); once every one ended without succeeding, the first one's failure."""

    def __init__(self, replay, handles):
        self._replay, self.handles = replay, handles

    def wait(self):
        while True:
            winner = next((handle for handle in self.handles if handle.state == OperationState.SUCCEEDED), None)
            if winner is not None or all(handle.done for handle in self.handles):
                break
            self._replay.suspend("any_of", self.handles)
        self._replay.saw(_failed_steps(self.handles))  # "any" accepts the others' failures
        self._replay.awaited(_ended_steps(self.handles))
        return (winner or self.handles[0]).wait()  # none succeeded: the first one's failure

    result = wait


class NoneOf:
    """``ctx.none_of(*handles)``: Axon's ``noneMatch`` with "the step succeeded" as the match.

    ``wait()`` returns ``False`` as soon as one of the handles succeeded (short-circuit, as
    ``any_of``: the others are neither awaited nor cancelled), ``True`` once every one ended
    without succeeding — failed, cancelled, or an event wait timed out — and otherwise suspends.
    It never raises a handle's failure: that no step succeeded is its answer (so the failures it
    answers over count as handled). The usual use:
    ``if ctx.none_of(approval_a, approval_b).wait(): escalate()``."""

    def __init__(self, replay, handles):
        self._replay, self.handles = replay, handles

    def wait(self):
        while True:
            succeeded = any(handle.state == OperationState.SUCCEEDED for handle in self.handles)
            if succeeded or all(handle.done for handle in self.handles):
                break
            self._replay.suspend("none_of", self.handles)
        self._replay.saw(_failed_steps(self.handles))
        self._replay.awaited(_ended_steps(self.handles))
        return not succeeded

    result = wait
