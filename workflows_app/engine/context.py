"""The workflow context: what a workflow function sees as ``ctx``, run with durable replay.

The dispatcher runs the workflow function from the top when it has something to decide and
no live run of it is kept (``engine.live``). A step whose name is already stored is not stored
or sent again: its handle reports the stored state (and a replay that asks for another call
under that name is refused: ``NonDeterministicWorkflow``). When the function needs a step that
is not done, it *suspends* (:meth:`WorkflowContext._suspend`): replay raises ``handles.Suspend``,
a live run switches back to the dispatcher and looks again when the next pass resumes it. The
dispatcher commits what was stored, and the function holds no thread or process until a
completion wakes the execution again.

The context also notes which failed steps the code was shown (a wait raised ``StepFailed``):
the dispatcher counts those as handled when the code goes on. And it follows the order of the
code: the steps awaited last (those no later awaited step came after) are stored as the
``after`` of the next steps it asks for — arrows of the picture, never dependencies: a step
asked for after a failure the code caught runs all the same.
"""

from dataclasses import replace

from greenlet import GreenletExit

from workflows_app import values
from workflows_app.engine import graph as graphs
from workflows_app.engine import children, failures, steps, waits
from workflows_app.engine.canvas import compile_canvas
from workflows_app.engine.handles import ENDED_BADLY, AllOf, AnyOf, NoneOf, StepHandle, Suspend, WaitHandle
from workflows_app.errors import NonDeterministicWorkflow, StepFailed, WorkflowError
from workflows_app.models import Operation, Wait
from workflows_app.registry import get_operation, operation_name
from workflows_app.states import OperationState, WaitKind

STEP_OPTIONS = ("max_retries", "retry_interval", "timeout")


class WorkflowFailed(WorkflowError):
    """``ctx.fail(reason)``: end the execution failed, after cancelling running steps."""


class WorkflowCancelled(WorkflowError):
    """``ctx.cancel(reason)``: end the execution cancelled, after cancelling running steps."""


class GraphBuilder:
    """``ctx.graph()``: add every step first, then ``run()`` stores the whole graph and waits."""

    def __init__(self, ctx):
        self._ctx, self._nodes = ctx, []

    def add(self, name, op, *args, agent=None, depends_on=(), **kwargs):
        options = {key: kwargs.pop(key) for key in STEP_OPTIONS if kwargs.get(key) is not None}
        for key in STEP_OPTIONS:
            kwargs.pop(key, None)
        self._nodes.append(_node(name, op, args, kwargs, agent, depends_on, options))
        return name

    def run(self):
        """Store the graph (once), wait until it is done; a dict of step name -> result."""
        self._ctx._store(self._nodes, awaited=False)
        names = [node.name for node in self._nodes]
        self._ctx._wait_graph(names)
        return {name: self._ctx._operations[name].result for name in names}


def _node(name, op, args, kwargs, agent, depends_on, options):
    return graphs.NodeSpec(name=name, operation=operation_name(op), args=tuple(args), kwargs=kwargs, agent=agent,
                           depends_on=tuple(_name_of(d) for d in depends_on), options=options)


def _name_of(dependency):
    return dependency.name if isinstance(dependency, StepHandle) else str(dependency)


class WorkflowContext:
    """``ctx`` of a workflow function."""

    def __init__(self, execution, operations):
        self._execution = execution
        self._canvas_calls = 0
        self._payload_changed = False
        self._wait_calls = {}  # prefix -> how many waits of that prefix this replay reached
        self._seen = set()  # the failed steps this replay showed the code
        # The steps the code awaited last, in order (a dict as an ordered set), and what each
        # step asked for in this replay depends on: a replay asks for every step again, in the
        # same order, so both come out the same and a step's ``after`` never changes.
        self._last_awaited, self._needs = {}, {}
        # The determinism guard's finding: it fails the execution even if the code caught it.
        self._nondeterminism = None
        # A live run (``engine.live.Run``) this context belongs to, and whether its pass is on:
        # between passes, and while an evicted run unwinds, it refuses every call.
        self._live, self._in_pass = None, False
        self._load(operations)

    def _load(self, operations):
        self._operations = {op.name: op for op in operations}
        self._waits = None  # key -> Wait, read on the first wait call (a workflow that never waits reads none)
        # The steps not ended yet (those a pass must look at again), and the failures not
        # handled yet (no step fails while a pass holds the execution's lock).
        self._open = {op.name for op in operations if not op.is_terminal}
        self._unhandled = {op.name for op in operations if op.state == OperationState.FAILED and not op.failure_handled}

    # --- what the workflow reads ---------------------------------------------------------
    @property
    def execution_id(self):
        return self._execution.pk

    @property
    def status(self):
        return self._execution.status

    @property
    def parameters(self):
        return dict(self._execution.parameters)

    @property
    def payload(self):
        return self._execution.payload

    def step_names(self):
        return list(self._operations)

    # --- steps ---------------------------------------------------------------------------
    def execute(self, name, op, *args, agent=None, depends_on=(), max_retries=None, retry_interval=None, timeout=None, **kwargs):
        """Start step ``name`` (once: a stored step is not started again); returns its handle."""
        options = {k: v for k, v in (("max_retries", max_retries), ("retry_interval", retry_interval),
                                      ("timeout", timeout)) if v is not None}
        self._store([_node(name, op, args, kwargs, agent, depends_on, options)], awaited=True)
        return StepHandle(self, name)

    def await_execute(self, *args, **kwargs):
        """``execute(...)`` and wait for its result."""
        return self.execute(*args, **kwargs).wait()

    def execute_workflow(self, name, workflow, *, deployment_id=None, timeout=None, **params):
        """Start the registered workflow ``workflow`` as a child execution, followed by step
        ``name`` of this one, once: on replay the stored child is awaited, never
        started twice. Its parameters are checked as a start checks them. The handle's result is
        the child's payload; a child that failed, timed out or was cancelled on its own fails the
        step (``StepFailed``). ``deployment_id``: the child's own (it never takes this
        execution's); ``timeout``: the child's, in seconds."""
        self._store([children.node(name, workflow, params, deployment_id=deployment_id, timeout=timeout)], awaited=True)
        return StepHandle(self, name)

    def await_workflow(self, *args, **kwargs):
        """``execute_workflow(...)`` and wait for the child's payload."""
        return self.execute_workflow(*args, **kwargs).wait()

    def all_of(self, *handles):
        return AllOf(self, handles)

    def any_of(self, *handles):
        return AnyOf(self, handles)

    def none_of(self, *handles):
        """True once every handle ended without succeeding, False as soon as one succeeded (``NoneOf``)."""
        for handle in handles:
            if not isinstance(handle, (StepHandle, WaitHandle)):
                raise TypeError(f"none_of takes step and wait handles, not {type(handle).__name__}")
        return NoneOf(self, handles)

    def graph(self):
        return GraphBuilder(self)

    def run_canvas(self, canvas):
        """Compile a Celery canvas of operation signatures into a stored graph and wait for it;
        returns what Celery would (a chain its last result, a group the list, a chord the body's).
        The first canvas of a workflow keeps its names as they are; the n-th (n > 1) is
        prefixed ``n-1/`` so that two canvases never share a step."""
        self._canvas_calls += 1
        compiled = compile_canvas(canvas, lambda sig: get_operation(sig.task).name)
        nodes = compiled.nodes
        prefix = "" if self._canvas_calls == 1 else f"{self._canvas_calls - 1}/"
        if prefix:
            nodes = [_prefixed(node, prefix) for node in nodes]
        self._store(nodes, awaited=False)
        names = [node.name for node in nodes]
        self._wait_graph(names)
        results = {name: self._operations[name].result for name in names}
        output = compiled.output.to_json()
        return graphs.resolve(_prefix_input(output, prefix) if prefix else output, results)

    # --- events, timers, cancelling a step ----------------------------------------------
    def await_event(self, name, timeout=None):
        """Wait (durably) for the external event ``name``; its payload. ``EventTimeout`` when
        none came within ``timeout`` seconds (the workflow may catch it). An event delivered
        before anyone waits for it is kept: each wait takes the oldest one not taken yet."""
        return self.wait_for_event(name, timeout).wait()

    def wait_for_event(self, name, timeout=None):
        """As ``await_event``, without waiting: a ``WaitHandle`` for ``all_of/any_of/none_of``.
        The k-th wait for ``name`` in the workflow is the same stored wait on every replay."""
        waits.check_name(name)
        timeout = waits.check_seconds(timeout, "timeout", optional=True)
        return self._wait_for(WaitKind.EVENT, f"event:{name}", name, timeout)

    def sleep(self, seconds):
        """A durable timer: the workflow suspends (holding no thread or process) and the
        manager's tick wakes it once ``seconds`` have passed since this sleep was first reached."""
        seconds = waits.check_seconds(seconds, "sleep")
        return self._wait_for(WaitKind.SLEEP, "sleep", "", seconds).wait()

    def cancel_step(self, handle):
        """Cancel one step, at once: a step not started yet never starts (its message
        is revoked, fencing refuses it anyway); a running one is asked to stop — SIGTERM to its
        process group, SIGKILL after KILL_GRACE_SECONDS — and what it reports later is kept as a
        ``stale_report`` event. Steps that depend on it can never start: they are cancelled too.
        A wait handle is cancelled. True if it was cancelled now, False if it had ended (the
        replay of a cancel is a no-op). Its ``wait()`` raises ``StepFailed``."""
        self._check_in_pass()
        if isinstance(handle, WaitHandle):
            return waits.cancel(handle._wait)
        if isinstance(handle, StepHandle):
            name = handle.name
        elif isinstance(handle, str):
            name = handle
        else:
            raise TypeError(f"cancel_step takes a step handle or a step name, not {type(handle).__name__}")
        if name not in self._operations:
            raise WorkflowError(f"cancel_step: no step named {name!r} in this execution")
        return bool(steps.cancel(self._execution, [self._operations[name]], "cancelled by the workflow (cancel_step)",
                                 dependents=True, known=self._operations))

    def set_payload(self, payload):
        """Replace the durable payload. ``ValueRefused`` for one that may not be stored (NUL,
        lone surrogate, NaN, too deep, larger than MAX_PAYLOAD_BYTES): uncaught, the execution
        fails naming why."""
        if not isinstance(payload, dict):
            raise TypeError("the payload is a JSON object (a dict)")
        values.check(payload, "payload")
        self._execution.payload = payload
        self._payload_changed = True

    def fail(self, reason):
        raise WorkflowFailed(reason)

    def cancel(self, reason=""):
        raise WorkflowCancelled(reason)

    # --- inside --------------------------------------------------------------------------
    def _suspend(self, name, handles=()):
        """The function needs something that is not done: replay ends here (``Suspend``); a
        live run waits for its next pass, then ``handles`` look again (a wait is settled)."""
        if self._live is None:
            raise Suspend(name)
        self._live.suspend(name)
        self._check_in_pass()
        for handle in handles:
            handle._refresh()

    def _check_in_pass(self):
        """A live run's context works only in its pass: an evicted run unwinds without effects."""
        if self._live is not None and not self._in_pass:
            raise GreenletExit("this run of the workflow was evicted; its next pass replays it")

    def _catch_up(self, execution, passes) -> bool:
        """A kept run's next pass: what changed since its last (``passes``: that pass's count).
        The steps it left open are read again; after a pass elsewhere, everything is. False
        when a failure is not handled: the failure mode runs first, then a replay."""
        self._execution = execution
        self._payload_changed = False
        if execution.passes != passes + 1:
            self._load(Operation.objects.filter(execution_id=execution.pk))
        elif self._open:
            fresh = steps.load([self._operations[name].pk for name in self._open])
            self._operations.update((op.name, op) for op in fresh)
            self._open = {op.name for op in fresh if not op.is_terminal}
            self._unhandled |= {op.name for op in fresh if op.state == OperationState.FAILED and not op.failure_handled}
        return not self._unhandled

    def _handled(self, names):
        """``failures.record_handled`` stored these failures as handled."""
        for name in names:
            self._operations[name].failure_handled = True
        self._unhandled -= set(names)

    def _unhandled_failures(self):
        """Names of the failed steps whose failure is not handled and that this replay has not
        shown the code."""
        return self._unhandled - self._seen

    def _handled_failures(self):
        """Names of the failed steps, not handled before, that this replay showed the code."""
        return self._unhandled & self._seen

    def _store(self, nodes, *, awaited):
        """Store the nodes not stored yet and send those that may start (``steps.store``); a new
        node that depends on a step which failed or was cancelled can never start: cancelled."""
        self._check_in_pass()
        self._needs.update((node.name, node.depends_on) for node in nodes)
        try:
            rows = steps.store(self._execution, self._operations, nodes, awaited=awaited,
                               failed=bool(self._unhandled_failures()), after=tuple(self._last_awaited))
        except NonDeterministicWorkflow as exc:
            self._nondeterminism = exc
            raise
        new = {row.name for row in rows}
        self._open |= new
        # A step can fail as it is sent: a child its deployment refused (``children.send``).
        self._unhandled |= {row.name for row in rows if row.state == OperationState.FAILED}
        doomed = {dep for node in nodes if node.name in new for dep in node.depends_on
                  if dep not in new and self._operations[dep].state in ENDED_BADLY}
        if doomed:
            steps.cancel_dependents(self._execution, [self._operations[name] for name in doomed], self._operations)

    def _wait_graph(self, names):
        """Return when every node succeeded; ``StepFailed`` once one did not and nothing more of
        the graph can run; otherwise suspend."""
        while True:
            operations = [self._operations[name] for name in names]
            if all(op.state == OperationState.SUCCEEDED for op in operations):
                self._awaited(names)
                return
            if not any(not op.is_terminal for op in operations):
                raise self._step_failed([op for op in operations if op.state in ENDED_BADLY])
            self._suspend(names[0])

    def _saw(self, operations):
        """The code was shown these steps' failures (and those they follow from)."""
        for operation in operations:
            self._seen.add(operation.name)
            cause = (operation.error or {}).get("cause") if isinstance(operation.error, dict) else None
            if cause:
                self._seen.add(cause)

    def _awaited(self, names):
        """The code has these steps' outcomes and goes on: they are the steps awaited last, in
        the place of those they follow (``after`` or dependencies, among themselves too)."""
        followed = set()
        for name in names:
            followed.update(self._operations[name].after or ())
            followed.update(self._needs.get(name, ()))
        for name in followed:
            self._last_awaited.pop(name, None)
        self._last_awaited.update((name, None) for name in names if name not in followed)

    def _step_failed(self, operations):
        """The ``StepFailed`` a wait raises over ``operations`` (those of it that ended without
        succeeding): for the first that failed — the cause — else the first cancelled."""
        self._saw(operations)
        self._awaited([op.name for op in operations])
        failed = [op for op in operations if op.state == OperationState.FAILED]
        first = failures.earliest(failed) if failed else operations[0]
        error = first.error or {"type": "Cancelled", "message": first.state}
        return StepFailed(first.name, error, error.get("cause") if isinstance(error, dict) else None)

    def _wait_for(self, kind, prefix, name, timeout):
        """The stored wait this call is on every replay (``<prefix>#<k>``, the k-th such call),
        stored when first reached; settled now if it can be. The waits are read once per
        replay, on the first call: a workflow that never waits costs no query."""
        self._check_in_pass()
        count = self._wait_calls[prefix] = self._wait_calls.get(prefix, 0) + 1
        key = f"{prefix}#{count}"
        wait = self._stored_waits().get(key)
        if wait is None:
            wait = self._waits[key] = waits.open_wait(self._execution, key, kind, name, timeout)
        waits.settle(wait)
        return WaitHandle(self, key)

    def _stored_waits(self):
        if self._waits is None:
            self._waits = {w.key: w for w in Wait.objects.filter(execution_id=self._execution.pk)}
        return self._waits


def _prefixed(node, prefix):
    return replace(node, name=prefix + node.name, depends_on=tuple(prefix + d for d in node.depends_on),
                   input=graphs.Input.from_json(_prefix_input(node.input.to_json(), prefix)) if node.input is not None else None)


def _prefix_input(data, prefix):
    if "result" in data:
        return {"result": prefix + data["result"]}
    return {"list": [_prefix_input(item, prefix) for item in data["list"]]}
