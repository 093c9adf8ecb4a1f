"""Canvas cases run both ways — on Switchyard (``ctx.run_canvas``) and on plain Celery — so a
test can compare the two answers (``tests/integration/test_canvas_celery.py``). Imported by
``tests.workflows``, so every process of a stack registers it.

Every case is built from one task that returns the arguments it received: ``s("b")`` run
after a task that returned ``["a"]`` returns ``[["a"], "b"]``. A result therefore shows what
each task received, not only what the canvas returned.
"""

from celery import chain, chord, group, shared_task
from celery.canvas import _chain

from workflows_app.engine.canvas import EMPTY_GROUPS_IN_CHAINS_DROPPED
from workflows_app.sdk import operation, workflow

CELERY_ECHO = "itc_celery_echo"


@operation(name="itc_echo", max_retries=0)
def echo(ctx, *args):
    """The arguments it received, as a list."""
    return list(args)


@shared_task(name=CELERY_ECHO, ignore_result=False)
def celery_echo(*args):
    """``itc_echo`` as a plain Celery task; it keeps its result (the project ignores results
    by default) so that a canvas of it can be read back."""
    return list(args)


def dropped_or_kept(dropped, kept):
    """What a live Celery worker returns for a chain with an empty group in it: ``dropped`` on
    Celery 5.7 and later, which leaves the group out, ``kept`` on 5.5 and 5.6, which run it as
    a chord with an empty header (``EMPTY_GROUPS_IN_CHAINS_DROPPED``)."""
    return dropped if EMPTY_GROUPS_IN_CHAINS_DROPPED else kept


# case -> (the canvas, built from ``s`` and ``si``, and what a live Celery worker returns for it).
# ``_chain`` keeps a structure that ``chain()`` and ``|`` would rewrite while building it.
CASES = {
    # chains
    "chain_of_one": (lambda s, si: chain(s("a")), ["a"]),
    "empty_chain_in_chain": (lambda s, si: _chain(s("a"), _chain(), s("c")), [["a"], "c"]),
    # groups, and Celery's unrolling of one-member groups
    "group_of_one": (lambda s, si: group(s("a")), [["a"]]),
    "group_in_group": (lambda s, si: group(group(s("a"), s("b")), s("c")), [["a"], ["b"], ["c"]]),
    "group_of_one_in_group": (lambda s, si: group(group(s("a")), s("b")), [["a"], ["b"]]),
    "group_of_one_in_chain": (lambda s, si: chain(s("a"), group(s("b")), s("c")), [[["a"], "b"], "c"]),
    "group_of_one_ending_chain": (lambda s, si: _chain(s("a"), group(s("b"))), [["a"], "b"]),
    "group_of_one_chain": (lambda s, si: group(chain(s("a"), s("b"))), [[["a"], "b"]]),
    "group_of_one_chain_ending_in_group": (
        lambda s, si: group(chain(s("a"), group(s("b"), s("c")))), [[["a"], "b"], [["a"], "c"]]),
    "group_of_chain_ending_in_group_and_more": (
        lambda s, si: group(chain(s("a"), group(s("b"), s("c"))), s("d")),
        [[[["a"], "b"], [["a"], "c"]], ["d"]]),
    "chain_of_one_group": (lambda s, si: chain(group(s("a"), s("b"))), [["a"], ["b"]]),
    # empty groups
    "empty_group": (lambda s, si: group([]), []),
    "empty_group_in_group": (lambda s, si: group(s("a"), group([])), [["a"]]),
    # empty groups in chains: from 5.7, ``chain()`` leaves them out and a worker skips those still
    # there; but ``a | group([]) | c`` still builds ``chain(a, chord([], c))``, whose header runs
    "empty_group_in_chain": (
        lambda s, si: _chain(s("a"), group([]), s("c")), dropped_or_kept([["a"], "c"], [[], "c"])),
    "empty_group_in_chain_built_by_chain": (
        lambda s, si: chain(s("a"), group([]), s("c")), dropped_or_kept([["a"], "c"], [[], "c"])),
    "empty_group_piped_in_chain": (lambda s, si: s("a") | group([]) | s("c"), [[], "c"]),
    "empty_group_starting_chain": (lambda s, si: _chain(group([]), s("c")), dropped_or_kept(["c"], [[], "c"])),
    "empty_group_ending_chain": (lambda s, si: _chain(s("a"), group([])), dropped_or_kept(["a"], [])),
    "empty_group_after_group_in_chain": (
        lambda s, si: _chain(s("a"), group(s("b"), s("c")), group([]), s("d")),
        dropped_or_kept([[[["a"], "b"], [["a"], "c"]], "d"], [[], "d"])),
    "group_of_one_empty_group_in_chain": (
        lambda s, si: _chain(s("a"), group([group([])]), s("c")), dropped_or_kept([["a"], "c"], [[], "c"])),
    # a worker unrolls one one-member group only: the group left is a chord's header
    "group_of_one_group_of_one_empty_group_in_chain": (
        lambda s, si: _chain(s("a"), group([group([group([])])]), s("c")), [[], "c"]),
    "empty_group_in_nested_chain": (
        lambda s, si: _chain(s("a"), _chain(s("b"), group([])), s("c")),
        dropped_or_kept([[["a"], "b"], "c"], [[], "c"])),
    "empty_group_ending_chain_in_group": (
        lambda s, si: group(_chain(s("a"), group([])), s("d")), dropped_or_kept([["a"], ["d"]], [[], ["d"]])),
    "empty_group_starting_chord_body": (
        lambda s, si: chord([s("a")], _chain(group([]), s("c"))), dropped_or_kept([[["a"]], "c"], [[], "c"])),
    "empty_group_ending_chord_body": (
        lambda s, si: chord([s("a")], _chain(s("b"), group([]))), dropped_or_kept([[["a"]], "b"], [])),
    "chain_of_empty_groups": (lambda s, si: _chain(group([]), group([])), []),
    # chord headers
    "chord_header_of_one_signature": (lambda s, si: chord(s("a"), s("z")), [[["a"]], "z"]),
    "chord_header_group_of_one": (lambda s, si: chord(group(s("a")), s("z")), [[["a"]], "z"]),
    "chord_header_with_group_of_one": (lambda s, si: chord([group(s("a")), s("b")], s("z")), [[["a"], ["b"]], "z"]),
    "chord_header_chain": (lambda s, si: chord(chain(s("a"), s("b")), s("z")), [[["a"], ["b"]], "z"]),
    "chord_header_of_one_chain_ending_in_group": (
        lambda s, si: chord([chain(s("a"), group(s("b"), s("c")))], s("z")), [[[[["a"], "b"], [["a"], "c"]]], "z"]),
    # empty chord headers
    "empty_chord": (lambda s, si: chord([], s("z")), [[], "z"]),
    "empty_chord_immutable_body": (lambda s, si: chord([], si("z")), ["z"]),
    "empty_chord_in_chain": (lambda s, si: chain(s("a"), chord([], s("z")), s("c")), [[[], "z"], "c"]),
    "empty_chord_ending_chain": (lambda s, si: chain(s("a"), chord([], s("z"))), [[], "z"]),
    "empty_chord_in_group": (lambda s, si: group(chord([], s("z")), s("b")), [[[], "z"], ["b"]]),
    # chord bodies that are groups
    "chord_body_group_of_one": (lambda s, si: chord([s("a"), s("b")], group(s("z"))), [[[["a"], ["b"]], "z"]]),
    "chord_body_group_of_one_in_chain": (
        lambda s, si: _chain(chord([s("a"), s("b")], group(s("z"))), s("c")), [[[["a"], ["b"]], "z"], "c"]),
    "chord_body_group_of_one_in_group": (
        lambda s, si: group(chord([s("a")], group(s("z"))), s("d")), [[[[["a"]], "z"]], ["d"]]),
    "group_of_one_chord_with_group_body": (
        lambda s, si: group(chord([s("a"), s("b")], group(s("z"), s("y")))),
        [[[["a"], ["b"]], "z"], [[["a"], ["b"]], "y"]]),
}


def build(case, task, queue):
    """The canvas of ``case`` made of signatures of ``task`` (the operation ``echo`` or the
    Celery task ``celery_echo``), each one routed to ``queue``."""
    make, _expected = CASES[case]
    return make(lambda *args: task.s(*args).set(queue=queue), lambda *args: task.si(*args).set(queue=queue))


def expected(case):
    return CASES[case][1]


@workflow(name="itc_canvas")
def canvas(ctx, case, agent):
    """Runs the canvas of ``case`` on ``agent``; keeps what ``run_canvas`` returned in the payload."""
    ctx.set_payload({"result": ctx.run_canvas(build(case, echo, agent))})
