"""The pure description of a workflow graph: nodes, their dependencies, and where a node's
input comes from. No database and no Celery here, so that the graph mode (``ctx.graph()``),
the canvas compiler and the agents that resolve inputs all share one small, testable model.

A node runs once every node it ``depends_on`` has succeeded. Its ``input``, when it has one,
is computed from other nodes' results at send time and passed as its first positional
argument (how a Celery chain passes a result on).
"""

import heapq
from dataclasses import dataclass, field

from workflows_app.errors import SwitchyardError
from workflows_app.states import StepKind


class GraphError(SwitchyardError, ValueError):
    """A graph (or a canvas) that cannot be run: duplicate names, an unknown or circular
    dependency, an input that does not fit, or a canvas construct Switchyard does not support."""


@dataclass(frozen=True)
class Input:
    """A value computed from other nodes' results: one node's result, or a list of inputs.

    JSON form: ``{"result": "<node name>"}`` or ``{"list": [<input>, ...]}`` (a group's
    results, in order; nested for nested groups). Build one with :meth:`of` or :meth:`list_of`.
    """

    result: str | None = None
    items: tuple["Input", ...] | None = None

    def __post_init__(self):
        if (self.result is None) == (self.items is None):
            raise GraphError("an input is either one node's result or a list of inputs")

    @classmethod
    def of(cls, name):
        """The result of node ``name``."""
        return cls(result=name)

    @classmethod
    def list_of(cls, inputs):
        """The list, in order, of the values of ``inputs``."""
        return cls(items=tuple(inputs))

    def names(self):
        """The names of the nodes this input reads, in order, each once."""
        if self.result is not None:
            return (self.result,)
        return tuple(dict.fromkeys(name for item in self.items for name in item.names()))

    def to_json(self):
        if self.result is not None:
            return {"result": self.result}
        return {"list": [item.to_json() for item in self.items]}

    @classmethod
    def from_json(cls, data):
        """The input that :meth:`to_json` wrote; ``GraphError`` for anything else."""
        if isinstance(data, dict) and set(data) == {"result"} and isinstance(data["result"], str):
            return cls.of(data["result"])
        if isinstance(data, dict) and set(data) == {"list"} and isinstance(data["list"], list):
            return cls.list_of(cls.from_json(item) for item in data["list"])
        raise GraphError(f"not an input: {data!r} (expected {{'result': name}} or {{'list': [...]}})")


def resolve(input_json, results):
    """The value of an input (its JSON form, or an :class:`Input`), given ``results``: a dict
    of node name -> result. ``GraphError`` when it reads a node that has no result there."""
    return _value(input_json if isinstance(input_json, Input) else Input.from_json(input_json), results)


def _value(input, results):
    if input.items is not None:
        return [_value(item, results) for item in input.items]
    if input.result not in results:
        raise GraphError(f"the input reads {input.result!r}, which has no result")
    return results[input.result]


@dataclass(frozen=True)
class NodeSpec:
    """One step of a graph, before it is stored.

    ``args`` and ``kwargs`` are bound now; ``input``, when set, is prepended to ``args`` at send
    time. ``agent`` is a queue name (``None``: the manager's queue). ``local``: run it inside the
    manager's pass (``None``: as its operation is declared). ``options`` holds only the
    step options that were given: ``max_retries``, ``retry_interval``, ``timeout``. A child
    execution's step (``kind`` "workflow") names the workflow as its ``operation``.
    """

    name: str
    operation: str
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)
    agent: str | None = None
    depends_on: tuple[str, ...] = ()
    input: Input | None = None
    options: dict = field(default_factory=dict)
    kind: StepKind = StepKind.OPERATION
    local: bool | None = None


def validate(nodes, known=()):
    """Raise ``GraphError`` unless ``nodes`` form a DAG: unique names, every dependency a node
    of the graph (or in ``known``, a container of the names stored before), no node depending on itself,
    no cycle. An input may read only nodes the node depends on, or it could be sent too early."""
    names = set()
    for node in nodes:
        if node.name in names:
            raise GraphError(f"two steps are named {node.name!r}")
        names.add(node.name)
    for node in nodes:
        if node.name in node.depends_on:
            raise GraphError(f"step {node.name!r} depends on itself")
        unknown = [dep for dep in node.depends_on if dep not in names and dep not in known]
        if unknown:
            raise GraphError(f"step {node.name!r} depends on unknown step(s) {', '.join(map(repr, unknown))}")
        unread = [name for name in (node.input.names() if node.input else ()) if name not in node.depends_on]
        if unread:
            raise GraphError(f"step {node.name!r} reads {', '.join(map(repr, unread))} without depending on it")
    left = set(names) - set(_kahn(nodes))
    if left:
        raise GraphError(f"the steps form a cycle: {' -> '.join(map(repr, _a_cycle(nodes, left)))}")


def topological_order(nodes, known=()):
    """The names of ``nodes``, each after its dependencies; among nodes that could go next,
    the one given first goes first (so the order is the same on every run). ``GraphError``
    as :func:`validate` says; dependencies on ``known`` names count as met."""
    validate(nodes, known)
    return _kahn(nodes)


def ready(nodes, done):
    """The names, in the given order, of the nodes not in ``done`` whose dependencies are all
    in ``done`` (the names of the nodes that succeeded)."""
    return [node.name for node in nodes
            if node.name not in done and all(dep in done for dep in node.depends_on)]


def _kahn(nodes):
    """Kahn's algorithm, with a heap of positions so that ties keep the given order. A
    dependency outside ``nodes`` counts as met (it was stored, and is waited on, before).
    Nodes on or after a cycle are left out."""
    index = {node.name: i for i, node in enumerate(nodes)}
    waiting = {node.name: {dep for dep in node.depends_on if dep in index} for node in nodes}
    dependents = {name: [] for name in index}
    for node in nodes:
        for dep in waiting[node.name]:
            dependents[dep].append(node.name)
    heap = [i for i, node in enumerate(nodes) if not waiting[node.name]]
    heapq.heapify(heap)
    order = []
    while heap:
        name = nodes[heapq.heappop(heap)].name
        order.append(name)
        for dependent in dependents[name]:
            waiting[dependent].discard(name)
            if not waiting[dependent]:
                heapq.heappush(heap, index[dependent])
    return order


def _a_cycle(nodes, left):
    """One cycle among ``left`` (the nodes Kahn could not order), first node repeated last.
    Each of them waits on another one of them, so walking dependencies must come back."""
    depends_on = {node.name: [dep for dep in node.depends_on if dep in left] for node in nodes}
    path, seen = [], {}
    name = next(node.name for node in nodes if node.name in left)
    while name not in seen:
        seen[name] = len(path)
        path.append(name)
        name = depends_on[name][0]
    return path[seen[name]:] + [name]
