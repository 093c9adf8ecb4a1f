"""The workflow context: what a workflow function sees as ``ctx``, run with durable replay.

The dispatcher runs the workflow function from the top each time it has something to decide.
A step whose name is already stored is not stored or sent again: its handle reports the
stored state. When the function needs a step that is not done, it *suspends*: ``Suspend``
unwinds it, the dispatcher commits what was stored, and the function holds no thread or
process until a completion wakes the execution again.
"""

from django.db import transaction

from workflows_app import dispatch
from workflows_app.conf import workflows_settings
from workflows_app.engine import graph as graphs
from workflows_app.engine import progress, waits
from workflows_app.errors import EventTimeout, StepFailed, TransitionRefused, WorkflowError
from workflows_app.models import Operation, OperationDependency, Wait
from workflows_app.registry import get_operation, operation_name
from workflows_app.states import OperationState, WaitKind, WaitOutcome
from workflows_app.transitions import operation_transition

STEP_OPTIONS = ("max_retries", "retry_interval", "timeout")


class Suspend(BaseException):
    """The workflow needs a step that is not done yet. A BaseException, so that a workflow's
    own ``except Exception`` cannot swallow it."""


class WorkflowFailed(WorkflowError):
    """``ctx.fail(reason)``: end the execution failed, after cancelling running steps."""


class WorkflowCancelled(WorkflowError):
    """``ctx.cancel(reason)``: end the execution cancelled, after cancelling running steps."""


class StepHandle:
    """A step started by ``ctx.execute`` (or a graph node): ``wait()``, ``result()``, ``state``."""

    def __init__(self, ctx, name):
        self._ctx, self.name = ctx, name

    @property
    def _operation(self):
        return self._ctx._operations[self.name]

    @property
    def state(self):
        return OperationState(self._operation.state)

    @property
    def done(self):
        return self._operation.is_terminal

    def wait(self):
        """The step's result; suspends the workflow until it is done; ``StepFailed`` if it failed."""
        operation = self._operation
        if operation.state == OperationState.SUCCEEDED:
            return operation.result
        if operation.state in (OperationState.FAILED, OperationState.CANCELLED):
            raise StepFailed(self.name, operation.error or {"message": operation.state})
        raise Suspend(self.name)

    result = wait

    def __repr__(self):
        return f"<StepHandle {self.name} {self._operation.state}>"

    def cancel(self):
        """``ctx.cancel_step(self)``: True if the step was cancelled now, False if it had ended."""
        return self._ctx.cancel_step(self)


class AllOf:
    def __init__(self, handles):
        self.handles = handles

    def wait(self):
        for handle in self.handles:  # a failure anywhere fails the whole, even before the rest ends
            if handle.state in (OperationState.FAILED, OperationState.CANCELLED):
                handle.wait()
        return [handle.wait() for handle in self.handles]


class AnyOf:
    def __init__(self, handles):
        self.handles = handles

    def wait(self):
        for handle in self.handles:
            if handle.state == OperationState.SUCCEEDED:
                return handle.wait()
        if all(handle.done for handle in self.handles):
            self.handles[0].wait()  # every one failed: raise the first's failure
        raise Suspend("any_of")


#: A wait's outcome as the state of a step, so that all_of / any_of / none_of mix both.
_WAIT_STATE = {
    WaitOutcome.WAITING: OperationState.STARTED,
    WaitOutcome.RECEIVED: OperationState.SUCCEEDED,
    WaitOutcome.ELAPSED: OperationState.SUCCEEDED,
    WaitOutcome.TIMED_OUT: OperationState.FAILED,
    WaitOutcome.CANCELLED: OperationState.CANCELLED,
}


class WaitHandle:
    """A stored wait (``ctx.wait_for_event``; ``ctx.sleep`` uses one too), with a StepHandle's
    interface: ``wait()``, ``result()``, ``state``, ``done``, ``cancel()``.

    ``wait()`` returns the event's payload (``None`` for a sleep), raises ``EventTimeout`` once
    the wait timed out and ``StepFailed`` once it was cancelled, and otherwise suspends the
    workflow. ``state`` is an ``OperationState``: ``started`` while waiting, ``succeeded``,
    ``failed`` (timed out) or ``cancelled``."""

    def __init__(self, ctx, wait):
        self._ctx, self._wait = ctx, wait

    @property
    def name(self):
        return self._wait.key

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
        wait = self._wait
        if wait.outcome in (WaitOutcome.RECEIVED, WaitOutcome.ELAPSED):
            return wait.payload
        if wait.outcome == WaitOutcome.TIMED_OUT:
            raise EventTimeout(wait.name, wait.timeout)
        if wait.outcome == WaitOutcome.CANCELLED:
            raise StepFailed(self.name, {"type": "Cancelled", "message": "the wait was cancelled"})
        raise Suspend(self.name)

    result = wait

    def cancel(self):
        """``ctx.cancel_step(self)``: True if the wait was cancelled now, False if it had ended."""
        return self._ctx.cancel_step(self)

    def __repr__(self):
        return f"<WaitHandle {self.name} {self._wait.outcome}>"


class NoneOf:
    """``ctx.none_of(*handles)``: Axon's ``noneMatch`` with "the step succeeded" as the match.

    ``wait()`` returns ``False`` as soon as one of the handles succeeded (short-circuit, as
    ``any_of``: the others are neither awaited nor cancelled), ``True`` once every one ended
    without succeeding — failed, cancelled, or an event wait timed out — and otherwise suspends.
    It never raises a handle's failure: that no step succeeded is its answer. The usual use:
    ``if ctx.none_of(approval_a, approval_b).wait(): escalate()``."""

    def __init__(self, handles):
        self.handles = handles

    def wait(self):
        if any(handle.state == OperationState.SUCCEEDED for handle in self.handles):
            return False
        if all(handle.done for handle in self.handles):
            return True
        raise Suspend("none_of")

    result = wait


class GraphBuilder:
    """``ctx.graph()``: add every step first, then ``run()`` stores the whole graph and waits."""

    def __init__(self, ctx):
        self._ctx, self._nodes = ctx, []

    def add(self, name, op, *args, agent=None, depends_on=(), **kwargs):
        options = {key: kwargs.pop(key) for key in STEP_OPTIONS if kwargs.get(key) is not None}
        for key in STEP_OPTIONS:
            kwargs.pop(key, None)
        node = graphs.NodeSpec(name=name, operation=operation_name(op), args=tuple(args), kwargs=kwargs, agent=agent,
                               depends_on=tuple(_name_of(d) for d in depends_on), options=options)
        self._nodes.append(node)
        return name

    def run(self):
        """Store the graph (once), wait until it is done; a dict of step name -> result."""
        self._ctx._store(self._nodes, awaited=False)
        names = [node.name for node in self._nodes]
        self._ctx._wait_graph(names)
        return {name: self._ctx._operations[name].result for name in names}


def _name_of(dependency):
    return dependency.name if isinstance(dependency, StepHandle) else str(dependency)


class WorkflowContext:
    """``ctx`` of a workflow function (SPEC §6)."""

    def __init__(self, execution, operations):
        self._execution = execution
        self._operations = {op.name: op for op in operations}
        self._canvas_calls = 0
        self._payload_changed = False
        self._waits = None  # key -> Wait, read on the first wait call (a workflow that never waits reads none)
        self._wait_calls = {}  # prefix -> how many waits of that prefix this replay reached

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
        if name not in self._operations:
            options = {k: v for k, v in (("max_retries", max_retries), ("retry_interval", retry_interval),
                                          ("timeout", timeout)) if v is not None}
            node = graphs.NodeSpec(name=name, operation=operation_name(op), args=tuple(args), kwargs=kwargs, agent=agent,
                                   depends_on=tuple(_name_of(d) for d in depends_on), options=options)
            self._store([node], awaited=True)
        return StepHandle(self, name)

    def await_execute(self, *args, **kwargs):
        """``execute(...)`` and wait for its result."""
        return self.execute(*args, **kwargs).wait()

    def all_of(self, *handles):
        return AllOf(handles)

    def any_of(self, *handles):
        return AnyOf(handles)

    def none_of(self, *handles):
        """True once every handle ended without succeeding, False as soon as one succeeded (``NoneOf``)."""
        for handle in handles:
            if not isinstance(handle, (StepHandle, WaitHandle)):
                raise TypeError(f"none_of takes step and wait handles, not {type(handle).__name__}")
        return NoneOf(handles)

    def graph(self):
        return GraphBuilder(self)

    def run_canvas(self, canvas):
        """Compile a Celery canvas of operation signatures into a stored graph and wait for it;
        returns what Celery would (a chain its last result, a group the list, a chord the body's).
        The first canvas of a workflow keeps its names as they are; the n-th (n > 1) is
        prefixed ``n-1/`` so that two canvases never share a step."""
        from workflows_app.engine.canvas import compile_canvas

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
        """Cancel one step (SPEC §7), at once: a step not started yet never starts (its message
        is revoked, fencing refuses it anyway); a running one is asked to stop — SIGTERM to its
        process group, SIGKILL after KILL_GRACE_SECONDS — and what it reports later is kept as a
        ``stale_report`` event. Steps that depend on it can never start: they are cancelled too.
        A wait handle is cancelled. True if it was cancelled now, False if it had ended (the
        replay of a cancel is a no-op). Its ``wait()`` raises ``StepFailed``."""
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
        return self._cancel_operation(self._operations[name], "cancelled by the workflow (cancel_step)")

    def set_payload(self, payload):
        if not isinstance(payload, dict):
            raise TypeError("the payload is a JSON object (a dict)")
        self._execution.payload = payload
        self._payload_changed = True

    def fail(self, reason):
        raise WorkflowFailed(reason)

    def cancel(self, reason=""):
        raise WorkflowCancelled(reason)

    # --- inside --------------------------------------------------------------------------
    def _store(self, nodes, *, awaited):
        """Store the nodes not stored yet (the graph whole, before anything is sent), then send
        those whose dependencies have all succeeded."""
        new = [node for node in nodes if node.name not in self._operations]
        if not new:
            return
        graphs.validate(new, known=set(self._operations))
        settings = workflows_settings
        rows = []
        for node in new:
            definition = get_operation(node.operation)
            unfinished = sum(1 for dep in node.depends_on
                             if dep not in self._operations or self._operations[dep].state != OperationState.SUCCEEDED)
            rows.append(Operation(
                execution=self._execution, name=node.name, operation=node.operation, args=list(node.args),
                kwargs=dict(node.kwargs), agent=node.agent or settings.MANAGEMENT_QUEUE,
                input=node.input.to_json() if node.input is not None else None, awaited=awaited,
                max_retries=_first(node.options.get("max_retries"), definition.max_retries, settings.MAX_RETRIES),
                retry_interval=_first(node.options.get("retry_interval"), definition.retry_interval, settings.RETRY_INTERVAL),
                retry_backoff=definition.retry_backoff,
                timeout=_first(node.options.get("timeout"), definition.timeout, None),
                pending_dependencies=unfinished,
            ))
        Operation.objects.bulk_create(rows)
        for row in rows:
            self._operations[row.name] = row
        OperationDependency.objects.bulk_create([
            OperationDependency(operation=self._operations[node.name], depends_on=self._operations[dep])
            for node in new for dep in node.depends_on
        ])
        progress.send_ready(self._execution, rows)

    def _wait_graph(self, names):
        """Return when every node succeeded; ``StepFailed`` once a node failed and the graph can
        make no more progress; otherwise suspend."""
        operations = [self._operations[name] for name in names]
        if all(op.state == OperationState.SUCCEEDED for op in operations):
            return
        failed = [op for op in operations if op.state in (OperationState.FAILED, OperationState.CANCELLED)]
        if failed and not progress.can_progress(self._execution):
            raise StepFailed(failed[0].name, failed[0].error or {"message": failed[0].state})
        raise Suspend(names[0])

    def _wait_for(self, kind, prefix, name, timeout):
        """The stored wait this call is on every replay (``<prefix>#<k>``, the k-th such call),
        stored when first reached; settled now if it can be. The waits are read once per
        replay, on the first call: a workflow that never waits costs no query."""
        if self._waits is None:
            self._waits = {w.key: w for w in Wait.objects.filter(execution_id=self._execution.pk)}
        count = self._wait_calls[prefix] = self._wait_calls.get(prefix, 0) + 1
        key = f"{prefix}#{count}"
        wait = self._waits.get(key)
        if wait is None:
            wait = self._waits[key] = waits.open_wait(self._execution, key, kind, name, timeout)
        return WaitHandle(self, waits.settle(wait))

    def _cancel_operation(self, operation, message):
        """Cancel first, terminate after, for one operation (see ``cancel_step``)."""
        error = {"type": "Cancelled", "message": message, "traceback": ""}
        for _ in range(3):  # an agent may move it on (sent -> started) meanwhile: read it again
            if operation.is_terminal:
                return False
            was = OperationState(operation.state)
            try:
                operation_transition(operation, OperationState.CANCELLED, message=message, error=error)
            except TransitionRefused:
                operation.refresh_from_db()
                continue
            if was == OperationState.STARTED:
                progress.stop_attempts(self._execution.pk, [(operation.pk, operation.attempt)])
            elif was in (OperationState.SENDING, OperationState.SENT):
                task_id = operation.task_id
                transaction.on_commit(lambda: dispatch.revoke([task_id]))
            self._cancel_dependents(operation)
            return True
        raise WorkflowError(f"cancel_step: step {operation.name!r} kept changing state; not cancelled")

    def _cancel_dependents(self, operation):
        """Steps that wait for ``operation`` (directly or not) can never start: cancel them."""
        by_pk = {op.pk: op for op in self._operations.values()}
        dependents = OperationDependency.objects.filter(depends_on_id=operation.pk).values_list("operation_id", flat=True)
        for pk in dependents:
            dependent = by_pk.get(pk)
            if dependent is not None and dependent.state == OperationState.PENDING:
                self._cancel_operation(dependent, f"not started: {operation.name} was cancelled")


def _first(*values):
    return next((v for v in values if v is not None), None)


def _prefixed(node, prefix):
    from dataclasses import replace

    return replace(node, name=prefix + node.name, depends_on=tuple(prefix + d for d in node.depends_on),
                   input=graphs.Input.from_json(_prefix_input(node.input.to_json(), prefix)) if node.input is not None else None)


def _prefix_input(data, prefix):
    if "result" in data:
        return {"result": prefix + data["result"]}
    return {"list": [_prefix_input(item, prefix) for item in data["list"]]}
