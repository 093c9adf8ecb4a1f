"""One run of a workflow function, as the engine sees it: what the run has stored and awaited.

The dispatcher runs the workflow function from the top when it has something to decide and
no live run of it is kept (``engine.live``). A step whose name is already stored is not stored
or sent again: its handle reports the stored state (and a replay that asks for another call
under that name is refused: ``NonDeterministicWorkflow``). When the function needs a step that
is not done, it *suspends* (:meth:`Replay.suspend`): replay raises ``handles.Suspend``, a live
run switches back to the dispatcher and looks again when the next pass resumes it. The
dispatcher commits what was stored, and the function holds no thread or process until a
completion wakes the execution again.

The run also notes which failed steps the code was shown (a wait raised ``StepFailed``): the
dispatcher counts those as handled when the code goes on. And it follows the order of the
code: the steps awaited last (those no later awaited step came after) are stored as the
``after`` of the next steps it asks for — arrows of the picture, never dependencies: a step
asked for after a failure the code caught runs all the same.

It also follows how far the run has come through what is stored: a stored step, or event or
sleep wait, that the run has not asked for yet (:meth:`Replay.unreached`) was stored by a later
point of the code. ``ctx.patched`` answers from that (:meth:`Replay.patched`): a run
that meets the call while something stored is still ahead of it is in an execution that had
passed that point before the change (false); one that meets it with nothing stored ahead (at
the *frontier*) reaches it for the first time (true).

A replay of an exported history (``history_only``: the replay check, ``engine.replaycheck``)
stores no step or wait, settles no wait and sends nothing: where the code asks for something
the history does not hold — a new step or wait, a first ``ctx.patched`` answer at the
frontier, the cancel of a step or wait that had not ended — it stops with :class:`PastHistory`, which says what the history still
held ahead of that point, if anything; a wait the history holds as waiting stays waiting.

Workflow code never sees this object: it sees ``WorkflowContext`` (``engine.context``), the
documented ``ctx``, which holds one ``Replay`` and calls it. The engine — the dispatcher, live
runs, handles, the failure mode — uses the public methods below and nothing else of it.
"""

from greenlet import GreenletExit

from workflows_app import values
from workflows_app.engine import failures, patches, steps, stopping, waits
from workflows_app.engine.handles import StepHandle, Suspend, WaitHandle
from workflows_app.errors import NonDeterministicWorkflow, StepFailed, WorkflowError
from workflows_app.local_steps import due
from workflows_app.models import Operation, Wait
from workflows_app.states import OPERATION_ENDED_BADLY, OperationState, WaitKind, WaitOutcome


class PastHistory(Suspend):
    """A replay of a history (``Replay(..., history_only=True)``) reached something the history
    does not hold: ``what`` names it (``step 'c'``); ``behind`` lists what the history stored
    that the replay had not reached then (:meth:`Replay.unreached`): empty when the code went on
    past the history's end — what the next pass of a running execution does —, else the code
    took another path than the one the execution took. A ``Suspend``: the code cannot catch it."""

    def __init__(self, what="", behind=()):
        super().__init__(what, tuple(behind))
        self.what, self.behind = what, tuple(behind)


class Replay:
    """One run's state. ``execution`` is the row the current pass locked; ``operations`` its
    steps by name, as this pass knows them; ``stored_waits``: its waits, when the caller read them
    (otherwise they are read on the first wait call). ``history_only``: a replay of an exported
    history, which changes nothing (the module's docstring)."""

    def __init__(self, execution, operations, *, stored_waits=None, history_only=False):
        self.execution = execution
        self.history_only = history_only
        #: In a replay of a history, the first ``PastHistory`` it raised (even if the code caught it).
        self.past_history = None
        #: The determinism guard's finding: it fails the execution even if the code caught it.
        self.nondeterminism = None
        #: ``ctx.set_payload`` was called in this pass: the dispatcher stores the payload.
        self.payload_changed = False
        self.canvas_calls = 0  # how many canvases this replay ran (the n-th one's names are prefixed)
        self._wait_calls = {}  # prefix -> how many waits of that prefix this replay reached
        self._seen = set()  # the failed steps this replay showed the code
        # The steps the code awaited last, in order (a dict as an ordered set), and what each
        # step asked for in this replay depends on: a replay asks for every step again, in the
        # same order, so both come out the same and a step's ``after`` never changes.
        self._last_awaited, self._needs = {}, {}
        # A live run (``engine.live.Run``) this replay belongs to, and whether its pass is on:
        # between passes, and while an evicted run unwinds, it refuses every call.
        self._live, self._in_pass = None, False
        # The stored steps and the keys of the waits this run has not asked for / has asked for
        # (``unreached``). Every step a run asks for is stored: those it asked for are the others.
        self.operations, self._unreached, self._reached_waits = {}, set(), set()
        self._load(operations, stored_waits)

    def _load(self, operations, stored_waits=None):
        before, ahead = self.operations, self._unreached
        self.operations = {op.name: op for op in operations}
        # key -> Wait, read on the first wait call (a workflow that never waits reads none)
        self._waits = None if stored_waits is None else {w.key: w for w in stored_waits}
        # Read again (a pass elsewhere overtook a live run): the steps it did not know of, and
        # those it knew of without having asked for them, are still ahead of it.
        self._unreached = {name for name in self.operations if name not in before or name in ahead}
        # The steps not ended yet (those a pass must look at again), and the failures not
        # handled yet (no step fails while a pass holds the execution's lock).
        self._open = {op.name for op in operations if not op.is_terminal}
        self._unhandled = {op.name for op in operations if op.state == OperationState.FAILED and not op.failure_handled}

    # --- what the dispatcher and live runs ask -------------------------------------------
    @property
    def steps_open(self) -> bool:
        """Whether a step this pass knows of has not ended (with none, ending cancels nothing)."""
        return bool(self._open)

    def unhandled_failures(self) -> set:
        """Names of the failed steps whose failure is not handled and that this replay has not
        shown the code."""
        return self._unhandled - self._seen

    def handled_failures(self) -> set:
        """Names of the failed steps, not handled before, that this replay showed the code."""
        return self._unhandled & self._seen

    def mark_handled(self, names):
        """``failures.record_handled`` stored these failures as handled."""
        for name in names:
            self.operations[name].failure_handled = True
        self._unhandled -= set(names)

    def attach(self, run):
        """``run`` (``engine.live.Run``, or its closed stand-in) now carries this replay."""
        self._live = run

    def enter_pass(self):
        self._in_pass = True

    def leave_pass(self):
        self._in_pass = False

    def catch_up(self, execution, passes) -> bool:
        """A kept run's next pass: what changed since its last (``passes``: that pass's count).
        The steps it left open are read again; after a pass elsewhere, everything is. False
        when a failure is not handled: the failure mode runs first, then a replay."""
        self.execution = execution
        self.payload_changed = False
        if execution.passes != passes + 1:
            self._load(Operation.objects.filter(execution_id=execution.pk))
        elif self._open:
            # A local step this pass just recorded is read as it wrote it (``local_steps.due``).
            stale = [name for name in self._open if not due.is_fresh(self.operations[name])]
            fresh = steps.load([self.operations[name].pk for name in stale]) if stale else []
            fresh += [self.operations[name] for name in self._open if name not in stale]
            self.operations.update((op.name, op) for op in fresh)
            self._open = {op.name for op in fresh if not op.is_terminal}
            self._unhandled |= {op.name for op in fresh if op.state == OperationState.FAILED and not op.failure_handled}
        return not self._unhandled

    # --- what handles ask ----------------------------------------------------------------
    def suspend(self, name, handles=()):
        """The function needs something that is not done: replay ends here (``Suspend``); a
        live run waits for its next pass, then ``handles`` look again (a wait is settled)."""
        if self._live is None:
            raise Suspend(name)
        self._live.suspend(name)
        self.check_in_pass()
        for handle in handles:
            handle.refresh()

    def check_in_pass(self):
        """A live run works only in its pass: an evicted run unwinds without effects."""
        if self._live is not None and not self._in_pass:
            raise GreenletExit("this run of the workflow was evicted; its next pass replays it")

    def stored_wait(self, key) -> Wait:
        return self._stored_waits()[key]

    def saw(self, operations):
        """The code was shown these steps' failures (and those they follow from)."""
        for operation in operations:
            self._seen.add(operation.name)
            cause = (operation.error or {}).get("cause") if isinstance(operation.error, dict) else None
            if cause:
                self._seen.add(cause)

    def awaited(self, names):
        """The code has these steps' outcomes and goes on: they are the steps awaited last, in
        the place of those they follow (``after`` or dependencies, among themselves too)."""
        followed = set()
        for name in names:
            followed.update(self.operations[name].after or ())
            followed.update(self._needs.get(name, ()))
        for name in followed:
            self._last_awaited.pop(name, None)
        self._last_awaited.update((name, None) for name in names if name not in followed)

    def step_failed(self, operations) -> StepFailed:
        """The ``StepFailed`` a wait raises over ``operations`` (those of it that ended without
        succeeding): for the first that failed — the cause — else the first cancelled."""
        self.saw(operations)
        self.awaited([op.name for op in operations])
        failed = [op for op in operations if op.state == OperationState.FAILED]
        first = failures.earliest(failed) if failed else operations[0]
        error = first.error or {"type": "Cancelled", "message": first.state}
        return StepFailed(first.name, error, error.get("cause") if isinstance(error, dict) else None)

    def unreached(self) -> list:
        """What is stored and this run has not asked for yet: steps (``step 'b'``), then event
        and sleep waits (``wait 'event:go#1'``), each in the order they were stored. Empty: the
        run is at the frontier, nothing stored lies ahead. (Patch markers do not count: code
        that retired a patch no longer asks for its marker, and must not be held behind by it.)"""
        ahead = [f"step {name!r}" for name in self.operations if name in self._unreached]
        ahead += [f"wait {key!r}" for key, wait in self._stored_waits().items()
                  if wait.kind != WaitKind.RETRY and key not in self._reached_waits]
        return ahead

    def _past_history(self, what):
        """A replay of a history reached ``what``, which the history does not hold: it ends here."""
        error = PastHistory(what, self.unreached())
        if self.past_history is None:
            self.past_history = error
        raise error

    # --- what ``ctx`` asks -----------------------------------------------------------------
    def store(self, nodes, *, awaited):
        """Store the nodes not stored yet and send those that may start (``steps.store``); a new
        node that depends on a step which failed or was cancelled can never start: cancelled."""
        self.check_in_pass()
        self._needs.update((node.name, node.depends_on) for node in nodes)
        self._unreached.difference_update(node.name for node in nodes)
        if self.history_only:
            return self._replay_history(nodes)
        try:
            rows = steps.store(self.execution, self.operations, nodes, awaited=awaited,
                               failed=bool(self.unhandled_failures()), after=tuple(self._last_awaited))
        except NonDeterministicWorkflow as exc:
            self.nondeterminism = exc
            raise
        new = {row.name for row in rows}
        self._open |= new
        # A step can fail as it is sent: a child its deployment refused (``children.send``).
        self._unhandled |= {row.name for row in rows if row.state == OperationState.FAILED}
        doomed = {dep for node in nodes if node.name in new for dep in node.depends_on
                  if dep not in new and self.operations[dep].state in OPERATION_ENDED_BADLY}
        if doomed:
            stopping.cancel_dependents(self.execution, [self.operations[name] for name in doomed], self.operations)

    def _replay_history(self, nodes):
        """``store`` in a replay of a history: the stored nodes must ask for their stored calls;
        a new one is past the history."""
        for node in nodes:
            stored = self.operations.get(node.name)
            if stored is not None:
                try:
                    steps.check_same_call(stored, node)
                except NonDeterministicWorkflow as exc:
                    self.nondeterminism = exc
                    raise
        new = [node.name for node in nodes if node.name not in self.operations]
        if new:
            self._past_history(f"step {new[0]!r}")

    def wait_graph(self, names):
        """Return when every node succeeded; ``StepFailed`` once one did not and nothing more of
        the graph can run; otherwise suspend."""
        while True:
            operations = [self.operations[name] for name in names]
            if all(op.state == OperationState.SUCCEEDED for op in operations):
                self.awaited(names)
                return
            if not any(not op.is_terminal for op in operations):
                raise self.step_failed([op for op in operations if op.state in OPERATION_ENDED_BADLY])
            self.suspend(names[0])

    def wait_for(self, kind, prefix, name, timeout) -> WaitHandle:
        """The stored wait this call is on every replay (``<prefix>#<k>``, the k-th such call),
        stored when first reached; settled now if it can be. The waits are read once per
        replay, on the first call: a workflow that never waits costs no query."""
        self.check_in_pass()
        count = self._wait_calls[prefix] = self._wait_calls.get(prefix, 0) + 1
        key = f"{prefix}#{count}"
        self._reached_waits.add(key)
        wait = self._stored_waits().get(key)
        if wait is None:
            if self.history_only:
                self._past_history(f"wait {key!r}")
            wait = self._waits[key] = waits.open_wait(self.execution, key, kind, name, timeout,
                                                      after=tuple(self._last_awaited))
        if not self.history_only:  # a history's wait that was waiting is where its history ends
            waits.settle(wait)
        return WaitHandle(self, key)

    def patched(self, change_id) -> bool:
        """``ctx.patched``: the answer stored for ``change_id`` in this execution; else false
        when something stored is still ahead of this run (:meth:`unreached`: the execution
        passed this point before the change), true at the frontier — stored, either way."""
        self.check_in_pass()
        answer = patches.stored(self.execution, change_id)
        if answer is not None:
            return answer
        if self.unreached():
            return patches.store(self.execution, change_id, False)
        if self.history_only:
            self._past_history(f"ctx.patched({change_id!r})")
        return patches.store(self.execution, change_id, True)

    def cancel_step(self, handle) -> bool:
        """``ctx.cancel_step``: a wait handle cancels its wait; a step is cancelled by name."""
        if isinstance(handle, WaitHandle):
            return handle.cancel()
        self.check_in_pass()
        if isinstance(handle, StepHandle):
            name = handle.name
        elif isinstance(handle, str):
            name = handle
        else:
            raise TypeError(f"cancel_step takes a step handle or a step name, not {type(handle).__name__}")
        if name not in self.operations:
            raise WorkflowError(f"cancel_step: no step named {name!r} in this execution")
        if self.history_only and not self.operations[name].is_terminal:
            self._past_history(f"cancel_step({name!r})")
        return bool(stopping.cancel(self.execution, [self.operations[name]], "cancelled by the workflow (cancel_step)",
                                    dependents=True, known=self.operations))

    def cancel_wait(self, key) -> bool:
        """A wait handle's ``cancel()``: True if the wait was cancelled now, False if it had ended."""
        self.check_in_pass()
        wait = self.stored_wait(key)
        if self.history_only and wait.outcome == WaitOutcome.WAITING:
            self._past_history(f"cancel_step({key!r})")
        return waits.cancel(wait)

    def set_payload(self, payload):
        if not isinstance(payload, dict):
            raise TypeError("the payload is a JSON object (a dict)")
        values.check(payload, "payload")
        self.execution.payload = payload
        self.payload_changed = True

    def _stored_waits(self):
        if self._waits is None:
            self._waits = {w.key: w for w in Wait.objects.filter(execution_id=self.execution.pk)}
        return self._waits
