"""Compile a Celery canvas of operation signatures into graph nodes, with Celery's meaning.

Nothing here sends anything: the nodes are stored by the engine, which counts fan-in in the
database instead of in Celery's chord counter.

Meaning (Celery's, as a live worker of the installed Celery answers):

- a **chain** runs its members one after another; each depends on what the previous member
  produced and, unless it is immutable (``.si()``), receives it as its first argument. A
  nested chain is spliced in (an empty one adds nothing); a chain with nothing to run, on its
  own, in a group or as a chord's body, is refused (Celery returns no result for it, or fails);
- a **group** runs its members in parallel, each with the group's own incoming dependencies
  and input; its output is the list of its members' outputs (a group directly inside a group
  or a chord header adds its members' outputs to that list, as Celery flattens it). An empty
  group runs nothing and its output is ``[]``. In a chain, what it means depends on the
  installed Celery (``EMPTY_GROUPS_IN_CHAINS_DROPPED``): Celery 5.7 and later leave it out
  (``chain()`` drops it as it builds the chain, a worker skips one still there; a chain of
  empty groups alone returns ``[]``), so the member after it gets the result before it;
  Celery 5.5 and 5.6 run it as a chord with an empty header, so the member after it waits
  for what the group waited for and receives ``[]``. ``a | group([]) | b`` builds
  ``chain(a, chord([], b))`` in every version: a chord, which runs even with an empty header.
  A one-member group in a chain is its member (Celery unrolls it): the next member gets a
  value, not a list. Elsewhere a group of one stays a list of one, except at the top level,
  where a group whose only member returns a group's list returns that list:
  ``group(chain(a, group(b, c)))`` returns ``[b, c]``;
- a **chord** is its header group followed by its body, the body receiving the list of the
  header's results: a list even of one, and ``[]`` for an empty header (the body still runs;
  in a chain it waits for the member before and receives ``[]``, not that member's result).
  A header given as one signature is a header of one; given as a chain, the chain's members
  are the header's members, run in parallel. A body that is a group stays a group: the chord
  returns its list, even of one; but a one-member body group passes its member's result, not
  a list, to what follows the chord in a chain.

Switchyard differs where Celery's answer is not one a graph can give: the body of a chord
whose header holds a group gets the results in header order (Celery's Redis backend does
not keep that order), and what follows a chord whose body group has several members runs
once, receiving their list (Celery runs it once per member).

Names: ``<position>:<operation>``, the position being the indices of the nested members
joined by dots, or the name given by ``.set(step="name")``. A chain member's position is its
index in the chain *as Celery runs it*: nested chains are spliced in (an empty one takes no
position), a one-member group (a chord's one-member body group too) is its member, an empty
group keeps its position (Celery 5.5, 5.6) or takes none (5.7 on, which leaves it out), and
a chord is two members, its header group then its body (and a chain body is spliced too).
Celery rewrites ``chain(a, group(b, c), d)`` into ``chain(a, chord([b, c], d))``, and this
rule names both alike: ``0:a``, ``1.0:b``, ``1.1:c``, ``2:d``. So a chord at chain position
``p`` has header members ``p.<i>`` and body ``p+1``, even when its header is empty; anywhere
else (at the top level, inside a group) a chord is read as that chain, so its header members
are ``<pos>.0.<i>`` and its body ``<pos>.1``. At the top level the canvas itself is the
container: a single signature is ``0:<op>``, a group's members and a chain's members are
``0:``, ``1:``, ...
"""

from dataclasses import dataclass

import celery
from celery.canvas import Signature, _chain, _chord, group

from workflows_app.engine.graph import GraphError, Input, NodeSpec, validate

STEP_OPTIONS = ("max_retries", "retry_interval", "timeout")
SIGNATURE_OPTIONS = {"queue", "step", *STEP_OPTIONS}
# Options that change when or after what a task runs: honouring them would bypass the graph.
REFUSED_OPTIONS = {
    "countdown": "Switchyard schedules in the database: use ctx.sleep() before run_canvas",
    "eta": "Switchyard schedules in the database: use ctx.sleep() before run_canvas",
    "link": "callbacks are not supported: chain the callback after the signature instead",
    "link_error": "error callbacks are not supported: catch StepFailed around run_canvas instead",
}

# Celery's own canvas tasks (chunks, xmap and xstarmap are Signature subclasses that set no
# subtask_type, so once serialised they come back as plain signatures of these tasks).
_BUILTIN_TASKS = {"celery.chunks": "chunks", "celery.map": "xmap", "celery.starmap": "xstarmap"}

# Whether the installed Celery leaves an empty group in a chain out. Celery 5.7 does: chain()
# drops it as it builds the chain, and a worker skips one still there when it runs the chain (in
# a _chain built as is, a nested chain, a one-member group: _chain.prepare_steps), unless the
# chain holds nothing else; what follows the group gets the result before it. Celery 5.5 and 5.6
# run it as a chord with an empty header: what follows gets []. A chord whose header is empty
# (what a | group([]) | b builds) is no empty group: it runs in every version.
EMPTY_GROUPS_IN_CHAINS_DROPPED = celery.VERSION >= (5, 7)

# Ends the elements of a chord's one-member body group in a chain: what comes next receives
# the member's result, but a chain that ends there returns the group's list (one item).
_BODY_GROUP_END = object()

# An empty group among a chain's elements, where the installed Celery drops it from the chain.
_EMPTY_GROUP = object()


@dataclass(frozen=True)
class CompiledCanvas:
    """The nodes of a canvas (in canvas order) and its ``output``: what ``run_canvas`` returns,
    resolved from the nodes' results (a chain its last result, a group the list, a chord the
    body's result)."""

    nodes: list[NodeSpec]
    output: Input


def compile_canvas(sig, operation_name_of=None):
    """Compile a Celery signature, chain, group or chord into a :class:`CompiledCanvas`.

    ``operation_name_of(signature)`` gives a plain signature's registered operation name, or
    raises ``GraphError`` for one that is not an operation; by default ``signature.task``.
    Raises ``GraphError`` for what Switchyard cannot run as Celery would: other canvas types
    (``chunks``, ``xmap``...), chains with nothing to run, callbacks, ``countdown``/``eta``,
    options or partial arguments on a chain/group/chord, and duplicate step names.
    """
    compiler = _Compiler(operation_name_of or (lambda s: s.task))
    sig = _signature(sig)
    if isinstance(sig, group):
        output = compiler.group(_members(sig), (), (), None)
        # Celery's group.apply_async hands back its lone member's result when that is a group's
        # own result; only the group it was asked to run does that, not a nested one.
        if len(output.items) == 1 and output.items[0].items is not None:
            output = output.items[0]
    else:
        output = compiler.chain(_chain_of(sig), (), (), None)
    validate(compiler.nodes)
    return CompiledCanvas(compiler.nodes, output)


class _Compiler:
    """Appends the nodes of each part; every method returns the part's output (an Input).

    ``deps`` and ``input`` are what the part receives from the element before it."""

    def __init__(self, operation_name_of):
        self.operation_name_of = operation_name_of
        self.nodes = []

    def chain(self, elements, pos, deps, input):
        last = max(k for k, element in enumerate(elements) if element is not _BODY_GROUP_END)
        index, output = 0, None
        for k, element in enumerate(elements):
            if element is _BODY_GROUP_END:
                if k > last:
                    output = Input.list_of([output])
                continue
            if isinstance(element, list):
                output = self.group(element, pos + (index,), deps, input)
            else:
                output = self.signature(element, pos + (index,), deps, input)
            index += 1
            # The next member waits for everything this one produced, and reads it; after an
            # empty group (which produced nothing) it waits for what the group waited for.
            deps, input = output.names() or deps, output
        return output

    def group(self, members, pos, deps, input):
        outputs = []
        for i, member in enumerate(members):
            member = _signature(member)
            if isinstance(member, group):
                outputs.extend(self.group(_members(member), pos + (i,), deps, input).items)
            elif isinstance(member, (_chain, _chord)):
                outputs.append(self.chain(_chain_of(member), pos + (i,), deps, input))
            else:
                outputs.append(self.signature(member, pos + (i,), deps, input))
        return Input.list_of(outputs)

    def signature(self, sig, pos, deps, input):
        kind = _BUILTIN_TASKS.get(sig.task) or (type(sig).__name__ if type(sig) is not Signature else None)
        if kind:
            raise GraphError(f"{kind} is not supported in a canvas: use signatures, chains, groups and chords")
        operation = self.operation_name_of(sig)
        options = dict(sig.options)
        _check_options(options, SIGNATURE_OPTIONS, f"signature {operation!r}")
        step, queue = options.get("step"), options.get("queue")
        if step is not None and (not isinstance(step, str) or not step):
            raise GraphError(f"step= of signature {operation!r} must be a non-empty string, not {step!r}")
        if queue is not None and not isinstance(queue, str):
            raise GraphError(f"queue= of signature {operation!r} must be a queue name, not {queue!r}")
        name = step or f"{'.'.join(map(str, pos))}:{operation}"
        self.nodes.append(NodeSpec(
            name=name, operation=operation, args=tuple(sig.args or ()), kwargs=dict(sig.kwargs or {}),
            agent=queue, depends_on=tuple(deps), input=None if sig.immutable else input,
            options={key: options[key] for key in STEP_OPTIONS if options.get(key) is not None},
        ))
        return Input.of(name)


def _chain_of(sig):
    """The elements of ``sig`` run as a chain on its own; ``GraphError`` when there are none
    (Celery returns no result for an empty chain, and fails on one in a group or chord)."""
    elements = _chain_elements(sig)
    if not elements:
        raise GraphError("an empty chain cannot run: give it at least one signature")
    if any(element is not _EMPTY_GROUP and element is not _BODY_GROUP_END for element in elements):
        elements = [element for element in elements if element is not _EMPTY_GROUP]
    # A chain of empty groups alone is one (Celery keeps one): it returns [].
    return [[] if element is _EMPTY_GROUP else element for element in elements]


def _chain_elements(sig, unrolled=0):
    """``sig`` read as the members of a chain, the way Celery runs it: a list of plain
    signatures and of lists (a group's members), maybe ``_BODY_GROUP_END`` and
    ``_EMPTY_GROUP``. Nested chains are spliced in, a one-member group is its member, and a
    chord is its header then its body's elements. ``unrolled``: how many one-member groups
    ``sig`` is the member of (a worker unrolls one, and drops the empty group it finds)."""
    sig = _signature(sig)
    if isinstance(sig, _chord):
        _check_container(sig, "chord")
        if sig.body is None:
            raise GraphError("a chord needs a body")
        body = _signature(sig.body)
        # A group whose only member is a group is that group: Celery flattens it.
        while isinstance(body, group) and len(_members(body)) == 1 and _is_group(_members(body)[0]):
            body = _signature(_members(body)[0])
        if isinstance(body, group) and len(_members(body)) == 1:
            # Named and passed on as its member, as in a chain; only its output is a list.
            return [_members(sig)] + _chain_of(_members(body)[0]) + [_BODY_GROUP_END]
        return [_members(sig)] + _chain_of(body)
    if isinstance(sig, _chain):
        _check_container(sig, "chain")
        return [element for task in sig.tasks for element in _chain_elements(task)]
    if isinstance(sig, group):
        members = _members(sig)
        if not members and EMPTY_GROUPS_IN_CHAINS_DROPPED and unrolled <= 1:
            return [_EMPTY_GROUP]
        # Celery unrolls a one-member group in a chain: the next member gets a value, not a list.
        return _chain_elements(members[0], unrolled + 1) if len(members) == 1 else [members]
    return [sig]


def _members(sig):
    """The members of a group, or the header of a chord, as a list (maybe empty)."""
    _check_container(sig, "chord" if isinstance(sig, _chord) else "group")
    tasks = sig.tasks.tasks if isinstance(sig.tasks, group) else sig.tasks
    return list(tasks or ())


def _is_group(sig):
    return isinstance(_signature(sig), group)


def _signature(sig):
    """A canvas part as a Signature (Celery's serialised dict form is accepted too)."""
    if isinstance(sig, Signature):
        return sig
    if isinstance(sig, dict) and "task" in sig:
        return Signature.from_dict(sig)
    raise GraphError(f"not a Celery signature: {sig!r}")


def _check_container(sig, kind):
    # Celery applies a container's options and partial arguments differently per kind (a
    # chain's reach only its first task): rather than guess, ask for them on the signatures.
    _check_options(dict(sig.options), set(), kind)
    if sig.args or (kind == "chord" and sig.kwargs.get("kwargs")):
        raise GraphError(f"partial arguments on a {kind} are not supported: give them to its signatures")


def _check_options(options, allowed, what):
    for key in options:
        if key in REFUSED_OPTIONS:
            raise GraphError(f"{key}= on {what} is not supported: {REFUSED_OPTIONS[key]}")
        if key not in allowed:
            supported = ", ".join(sorted(allowed)) if allowed else "none; set options on its signatures"
            raise GraphError(f"option {key}= on {what} is not supported (supported: {supported})")
