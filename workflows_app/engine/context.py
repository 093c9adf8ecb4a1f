"""The workflow context: what a workflow function sees as ``ctx``.

``WorkflowContext`` is the documented surface and nothing more: it holds one ``Replay``
(``engine.replay``, the run as the engine sees it: what is stored, awaited, open) and calls
it. How a run is replayed and suspended is told there.
"""

from dataclasses import replace

from workflows_app.engine import graph as graphs
from workflows_app.engine import children, patches, waits
from workflows_app.engine.canvas import compile_canvas
from workflows_app.engine.handles import AllOf, AnyOf, NoneOf, StepHandle, WaitHandle
from workflows_app.engine.replay import Replay
from workflows_app.errors import WorkflowError
from workflows_app.registry import get_operation, operation_name
from workflows_app.states import WaitKind

STEP_OPTIONS = ("max_retries", "retry_interval", "timeout")


class WorkflowFailed(WorkflowError):
    """``ctx.fail(reason)``: end the execution failed, after cancelling running steps."""


class WorkflowCancelled(WorkflowError):
    """``ctx.cancel(reason)``: end the execution cancelled, after cancelling running steps."""


class GraphBuilder:
    """``ctx.graph()``: add every step first, then ``run()`` stores the whole graph and waits."""

    def __init__(self, replay):
        self._replay, self._nodes = replay, []

    def add(self, name, op, *args, agent=None, depends_on=(), local=None, **kwargs):
        options = {key: kwargs.pop(key) for key in STEP_OPTIONS if kwargs.get(key) is not None}
        for key in STEP_OPTIONS:
            kwargs.pop(key, None)
        self._nodes.append(_node(name, op, args, kwargs, agent, depends_on, options, local))
        return name

    def run(self):
        """Store the graph (once), wait until it is done; a dict of step name -> result."""
        self._replay.store(self._nodes, awaited=False)
        names = [node.name for node in self._nodes]
        self._replay.wait_graph(names)
        return {name: self._replay.operations[name].result for name in names}


def _node(name, op, args, kwargs, agent, depends_on, options, local=None):
    if local is not None and not isinstance(local, bool):
        raise TypeError(f"step {name!r}: local must be True, False or None, not {local!r}")
    return graphs.NodeSpec(name=name, operation=operation_name(op), args=tuple(args), kwargs=kwargs, agent=agent,
                           depends_on=tuple(_name_of(d) for d in depends_on), options=options, local=local)


def _name_of(dependency):
    return dependency.name if isinstance(dependency, StepHandle) else str(dependency)


class WorkflowContext:
    """``ctx`` of a workflow function (and of its lifecycle listeners)."""

    def __init__(self, replay: Replay):
        self._replay = replay

    # --- what the workflow reads ---------------------------------------------------------
    @property
    def execution_id(self):
        return self._replay.execution.pk

    @property
    def status(self):
        return self._replay.execution.status

    @property
    def parameters(self):
        return dict(self._replay.execution.parameters)

    @property
    def payload(self):
        return self._replay.execution.payload

    def step_names(self):
        return list(self._replay.operations)

    # --- steps ---------------------------------------------------------------------------
    def execute(self, name, op, *args, agent=None, depends_on=(), max_retries=None, retry_interval=None, timeout=None,
                local=None, **kwargs):
        """Start step ``name`` (once: a stored step is not started again); returns its handle.
        ``local``: run it inside this pass, on the manager, with no agent and no message (``None``:
        as the operation is declared); a local step names no agent (``ValueError``)."""
        options = {k: v for k, v in (("max_retries", max_retries), ("retry_interval", retry_interval),
                                      ("timeout", timeout)) if v is not None}
        self._replay.store([_node(name, op, args, kwargs, agent, depends_on, options, local)], awaited=True)
        return StepHandle(self._replay, name)

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
        self._replay.store([children.node(name, workflow, params, deployment_id=deployment_id, timeout=timeout)], awaited=True)
        return StepHandle(self._replay, name)

    def await_workflow(self, *args, **kwargs):
        """``execute_workflow(...)`` and wait for the child's payload."""
        return self.execute_workflow(*args, **kwargs).wait()

    def all_of(self, *handles):
        return AllOf(self._replay, handles)

    def any_of(self, *handles):
        return AnyOf(self._replay, handles)

    def none_of(self, *handles):
        """True once every handle ended without succeeding, False as soon as one succeeded (``NoneOf``)."""
        for handle in handles:
            if not isinstance(handle, (StepHandle, WaitHandle)):
                raise TypeError(f"none_of takes step and wait handles, not {type(handle).__name__}")
        return NoneOf(self._replay, handles)

    def graph(self):
        return GraphBuilder(self._replay)

    def run_canvas(self, canvas):
        """Compile a Celery canvas of operation signatures into a stored graph and wait for it;
        returns what Celery would (a chain its last result, a group the list, a chord the body's).
        The first canvas of a workflow keeps its names as they are; the n-th (n > 1) is
        prefixed ``n-1/`` so that two canvases never share a step."""
        replay = self._replay
        replay.canvas_calls += 1
        compiled = compile_canvas(canvas, lambda sig: get_operation(sig.task).name)
        nodes = compiled.nodes
        prefix = "" if replay.canvas_calls == 1 else f"{replay.canvas_calls - 1}/"
        if prefix:
            nodes = [_prefixed(node, prefix) for node in nodes]
        replay.store(nodes, awaited=False)
        names = [node.name for node in nodes]
        replay.wait_graph(names)
        results = {name: replay.operations[name].result for name in names}
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
        return self._replay.wait_for(WaitKind.EVENT, f"event:{name}", name, timeout)

    def sleep(self, seconds):
        """A durable timer: the workflow suspends (holding no thread or process) and the
        manager's tick wakes it once ``seconds`` have passed since this sleep was first reached."""
        seconds = waits.check_seconds(seconds, "sleep")
        return self._replay.wait_for(WaitKind.SLEEP, "sleep", "", seconds).wait()

    def cancel_step(self, handle):
        """Cancel one step, at once: a step not started yet never starts (its message
        is revoked, fencing refuses it anyway); a running one is asked to stop — SIGTERM to its
        process group, SIGKILL after KILL_GRACE_SECONDS — and what it reports later is kept as a
        ``stale_report`` event. Steps that depend on it can never start: they are cancelled too.
        A wait handle is cancelled. True if it was cancelled now, False if it had ended (the
        replay of a cancel is a no-op). Its ``wait()`` raises ``StepFailed``."""
        return self._replay.cancel_step(handle)

    # --- changing the code while executions run --------------------------------------------
    def patched(self, change_id):
        """Whether this execution takes the new path of a code change named ``change_id``:
        True when it reaches this call for the first time with the change deployed, False
        when it had passed this point before (it had stored steps or waits that this run of
        the function has not reached yet). The answer is stored the first time, so every
        later run of this execution gets the same one. A change id is a non-empty string of
        at most 200 characters (TypeError, ValueError)."""
        return self._replay.patched(patches.check_change_id(change_id))

    def set_payload(self, payload):
        """Replace the durable payload. ``ValueRefused`` for one that may not be stored (NUL,
        lone surrogate, NaN, too deep, larger than MAX_PAYLOAD_BYTES): uncaught, the execution
        fails naming why."""
        self._replay.set_payload(payload)

    def fail(self, reason):
        raise WorkflowFailed(reason)

    def cancel(self, reason=""):
        raise WorkflowCancelled(reason)


def _prefixed(node, prefix):
    return replace(node, name=prefix + node.name, depends_on=tuple(prefix + d for d in node.depends_on),
                   input=graphs.Input.from_json(_prefix_input(node.input.to_json(), prefix)) if node.input is not None else None)


def _prefix_input(data, prefix):
    if "result" in data:
        return {"result": prefix + data["result"]}
    return {"list": [_prefix_input(item, prefix) for item in data["list"]]}
