"""The canvas compiler: Celery canvases of plain signatures become graph nodes with Celery's
meaning, named by position and operation. No database, no broker, no Celery app."""

import pytest
from celery import chain, chord, group, signature
from celery.canvas import _chain, chunks, xmap, xstarmap

from workflows_app.engine.canvas import EMPTY_GROUPS_IN_CHAINS_DROPPED, compile_canvas
from workflows_app.engine.graph import GraphError, Input, resolve, topological_order


def s(name, *args, **kwargs):
    return signature(name, args=args, kwargs=kwargs)


def si(name, *args, **kwargs):
    return signature(name, args=args, kwargs=kwargs, immutable=True)


def by_name(compiled):
    return {node.name: node for node in compiled.nodes}


def names(compiled):
    return [node.name for node in compiled.nodes]


def inputs(compiled):
    return {node.name: node.input.to_json() if node.input else None for node in compiled.nodes}


def deps(compiled):
    return {node.name: set(node.depends_on) for node in compiled.nodes}


OPERATIONS = {
    "add": lambda *xs: sum(xs),
    "mul": lambda x, y=10: x * y,
    "xsum": lambda xs, k=0: sum(xs) + k,
    "pair": lambda *xs: list(xs),
}


def run(compiled):
    """Run the compiled graph the way the engine does: in dependency order, each node's input
    prepended to its bound arguments; then resolve the canvas output."""
    nodes, results = by_name(compiled), {}
    for name in topological_order(compiled.nodes):
        node = nodes[name]
        args = ([resolve(node.input.to_json(), results)] if node.input else []) + list(node.args)
        results[name] = OPERATIONS[node.operation](*args, **node.kwargs)
    return resolve(compiled.output.to_json(), results)


def nested_example_chain():
    return chain(s("add", 1, 1), group(s("add", 2), s("mul", 3)), s("xsum"))


# --- the nested example, whichever way it is spelled ------------------------------------
def test_the_nested_example_is_named_by_position_and_operation():
    assert names(compile_canvas(nested_example_chain())) == ["0:add", "1.0:add", "1.1:mul", "2:xsum"]


def test_the_nested_example_spelled_with_pipes_compiles_to_the_same_nodes():
    piped = s("add", 1, 1) | group(s("add", 2), s("mul", 3)) | s("xsum")
    assert compile_canvas(piped) == compile_canvas(nested_example_chain())


def test_the_nested_example_without_celerys_chord_upgrade_compiles_to_the_same_nodes():
    raw = _chain(s("add", 1, 1), group(s("add", 2), s("mul", 3)), s("xsum"))
    assert compile_canvas(raw) == compile_canvas(nested_example_chain())


def test_the_nested_example_task_after_the_group_receives_the_group_results_in_order_and_waits_for_both():
    compiled = compile_canvas(nested_example_chain())
    assert deps(compiled)["2:xsum"] == {"1.0:add", "1.1:mul"}
    assert inputs(compiled)["2:xsum"] == {"list": [{"result": "1.0:add"}, {"result": "1.1:mul"}]}


def test_the_nested_example_computes_what_celery_computes():
    # add(1, 1) = 2; add(2, 2) = 4, mul(2, 3) = 6; xsum([4, 6]) = 10
    assert run(compile_canvas(nested_example_chain())) == 10


# --- chains -------------------------------------------------------------------------------
def test_a_chain_passes_each_result_to_the_next_member_as_its_first_argument():
    compiled = compile_canvas(chain(s("add", 1, 2), s("mul"), s("add", 1)))
    assert inputs(compiled) == {"0:add": None, "1:mul": {"result": "0:add"}, "2:add": {"result": "1:mul"}}
    assert deps(compiled) == {"0:add": set(), "1:mul": {"0:add"}, "2:add": {"1:mul"}}
    assert run(compiled) == 31


def test_an_immutable_member_waits_for_the_previous_one_but_receives_nothing():
    compiled = compile_canvas(chain(s("add", 1, 2), si("add", 5, 5), s("mul")))
    assert by_name(compiled)["1:add"].input is None
    assert deps(compiled)["1:add"] == {"0:add"}
    assert run(compiled) == 100


def test_a_chain_returns_its_last_result():
    assert compile_canvas(chain(s("add", 1), s("mul"))).output == Input.of("1:mul")


def test_a_nested_chain_is_spliced_into_its_chain_as_celery_runs_it():
    compiled = compile_canvas(_chain(s("add", 1), _chain(s("mul"), s("mul")), s("add", 1)))
    assert names(compiled) == ["0:add", "1:mul", "2:mul", "3:add"]
    assert run(compiled) == 101


def test_a_chain_of_one_member_returns_that_members_result():
    compiled = compile_canvas(chain(s("add", 1, 2)))
    assert names(compiled) == ["0:add"] and compiled.output == Input.of("0:add")
    assert run(compiled) == 3


def test_an_empty_chain_inside_a_chain_adds_nothing_and_takes_no_position():
    compiled = compile_canvas(_chain(s("add", 1), _chain(), s("mul")))
    assert names(compiled) == ["0:add", "1:mul"]
    assert inputs(compiled)["1:mul"] == {"result": "0:add"}
    assert run(compiled) == 10


# --- groups -------------------------------------------------------------------------------
def test_a_top_level_group_runs_its_members_in_parallel_and_returns_their_results_in_order():
    compiled = compile_canvas(group(s("add", 1, 1), s("mul", 3), s("add", 5)))
    assert names(compiled) == ["0:add", "1:mul", "2:add"]
    assert all(not node.depends_on and node.input is None for node in compiled.nodes)
    assert run(compiled) == [2, 30, 5]


def test_a_group_in_a_chain_passes_the_previous_result_to_each_member():
    compiled = compile_canvas(chain(s("add", 1, 1), group(s("add", 2), s("mul", 3), si("add", 7))))
    assert inputs(compiled) == {"0:add": None, "1.0:add": {"result": "0:add"}, "1.1:mul": {"result": "0:add"},
                                "1.2:add": None}
    assert deps(compiled)["1.2:add"] == {"0:add"}
    assert run(compiled) == [4, 6, 7]


def test_a_group_of_chains_names_each_chain_member_under_its_group_position():
    compiled = compile_canvas(group(chain(s("add", 1, 1), s("mul")), chain(s("add", 2, 2), s("mul", y=3))))
    assert names(compiled) == ["0.0:add", "0.1:mul", "1.0:add", "1.1:mul"]
    assert deps(compiled) == {"0.0:add": set(), "0.1:mul": {"0.0:add"}, "1.0:add": set(), "1.1:mul": {"1.0:add"}}
    assert run(compiled) == [20, 12]


def test_a_chain_of_groups_feeds_the_whole_first_group_to_each_member_of_the_second():
    compiled = compile_canvas(chain(group(s("add", 1), s("add", 2)), group(s("xsum"), s("xsum", k=10))))
    assert deps(compiled)["1.1:xsum"] == {"0.0:add", "0.1:add"}
    assert run(compiled) == [3, 13]


def test_a_group_directly_in_a_group_adds_its_results_to_the_list_as_celery_flattens_it():
    compiled = compile_canvas(group(group(s("add", 1), s("add", 2)), s("add", 3)))
    assert names(compiled) == ["0.0:add", "0.1:add", "1:add"]
    assert run(compiled) == [1, 2, 3]


def test_a_chain_ending_in_a_group_inside_a_group_returns_a_nested_list():
    compiled = compile_canvas(group(chain(s("add", 1), group(s("add", 1), s("mul"))), s("add", 3)))
    assert names(compiled) == ["0.0:add", "0.1.0:add", "0.1.1:mul", "1:add"]
    assert run(compiled) == [[2, 10], 3]


def test_a_one_member_group_in_a_chain_passes_a_value_not_a_list_as_celery_unrolls_it():
    compiled = compile_canvas(_chain(s("add", 1, 1), group(s("mul")), s("add", 1)))
    assert names(compiled) == ["0:add", "1:mul", "2:add"]
    assert run(compiled) == 21


def test_a_one_member_group_ending_a_chain_makes_the_chain_return_a_value_not_a_list():
    compiled = compile_canvas(_chain(s("add", 1, 1), group(s("mul"))))
    assert names(compiled) == ["0:add", "1:mul"]
    assert run(compiled) == 20


def test_a_one_member_group_inside_a_group_adds_its_result_to_the_list():
    compiled = compile_canvas(group(group(s("add", 1)), s("add", 2)))
    assert names(compiled) == ["0.0:add", "1:add"]
    assert run(compiled) == [1, 2]


def test_a_top_level_group_of_one_signature_returns_a_list_of_one():
    compiled = compile_canvas(group(s("add", 1, 1)))
    assert names(compiled) == ["0:add"]
    assert run(compiled) == [2]


def test_a_top_level_group_of_one_chain_returns_a_list_of_that_chains_result():
    compiled = compile_canvas(group(chain(s("add", 1, 1), s("mul"))))
    assert names(compiled) == ["0.0:add", "0.1:mul"]
    assert run(compiled) == [20]


def test_a_top_level_group_of_one_chain_ending_in_a_group_returns_that_groups_list_as_celery_does():
    # Celery's group(chain(a, group(b, c))) returns [b, c], not [[b, c]]; the names do not change.
    compiled = compile_canvas(group(chain(s("add", 1), group(s("add", 1), s("mul")))))
    assert names(compiled) == ["0.0:add", "0.1.0:add", "0.1.1:mul"]
    assert run(compiled) == [2, 10]


def test_a_top_level_group_of_one_chord_with_a_group_body_returns_the_body_groups_list():
    compiled = compile_canvas(group(chord([s("add", 1), s("add", 2)], group(s("xsum"), s("xsum", k=10)))))
    assert names(compiled) == ["0.0.0:add", "0.0.1:add", "0.1.0:xsum", "0.1.1:xsum"]
    assert run(compiled) == [3, 13]


def test_a_group_of_one_chain_ending_in_a_group_below_the_top_level_stays_a_list_of_one():
    compiled = compile_canvas(chord([chain(s("add", 1), group(s("add", 1), s("mul")))], s("pair")))
    assert run(compiled) == [[[2, 10]]]


# --- chords -------------------------------------------------------------------------------
def test_a_chord_body_receives_the_header_results_in_header_order_and_waits_for_all():
    compiled = compile_canvas(chord([s("pair", 1), s("pair", 2), s("pair", 3)], s("pair")))
    assert names(compiled) == ["0.0:pair", "0.1:pair", "0.2:pair", "1:pair"]
    assert deps(compiled)["1:pair"] == {"0.0:pair", "0.1:pair", "0.2:pair"}
    assert run(compiled) == [[[1], [2], [3]]]


def test_a_chord_returns_its_bodys_result():
    assert compile_canvas(chord([s("add", 1), s("add", 2)], s("xsum"))).output == Input.of("1:xsum")


def test_an_immutable_chord_body_waits_for_the_whole_header_but_receives_nothing():
    compiled = compile_canvas(chord([s("add", 1), s("add", 2)], si("add", 9)))
    assert by_name(compiled)["1:add"].input is None
    assert deps(compiled)["1:add"] == {"0.0:add", "0.1:add"}


def test_a_chord_with_a_one_member_header_still_gives_its_body_a_list():
    compiled = compile_canvas(group(s("add", 1, 1)) | s("pair"))
    assert inputs(compiled)["1:pair"] == {"list": [{"result": "0.0:add"}]}
    assert run(compiled) == [[2]]


def test_a_chord_whose_header_is_a_single_signature_gives_its_body_a_list_of_one():
    compiled = compile_canvas(chord(s("add", 1, 1), s("pair")))
    assert names(compiled) == ["0.0:add", "1:pair"]
    assert run(compiled) == [[2]]


def test_a_chord_whose_header_is_a_chain_runs_the_chains_members_in_parallel_as_its_header():
    compiled = compile_canvas(chord(chain(s("add", 1), s("add", 2)), s("pair")))
    assert names(compiled) == ["0.0:add", "0.1:add", "1:pair"]
    assert deps(compiled) == {"0.0:add": set(), "0.1:add": set(), "1:pair": {"0.0:add", "0.1:add"}}
    assert run(compiled) == [[1, 2]]


def test_a_one_member_group_in_a_chord_header_adds_its_result_to_the_bodys_list():
    compiled = compile_canvas(chord([group(s("add", 1)), s("add", 2)], s("pair")))
    assert names(compiled) == ["0.0.0:add", "0.1:add", "1:pair"]
    assert run(compiled) == [[1, 2]]


def test_a_group_in_a_chord_header_gives_the_body_its_results_in_header_order():
    # Celery's Redis backend hands these to the body out of order; Switchyard keeps the order.
    compiled = compile_canvas(chord([group(s("add", 1), s("add", 2)), s("add", 3)], s("pair")))
    assert run(compiled) == [[1, 2, 3]]


def test_a_chord_with_an_empty_header_runs_its_body_with_an_empty_list():
    compiled = compile_canvas(chord([], s("pair")))
    assert names(compiled) == ["1:pair"]
    assert deps(compiled) == {"1:pair": set()} and inputs(compiled) == {"1:pair": {"list": []}}
    assert run(compiled) == [[]]


def test_an_immutable_body_of_a_chord_with_an_empty_header_receives_nothing():
    compiled = compile_canvas(chord([], si("add", 4, 5)))
    assert inputs(compiled) == {"1:add": None}
    assert run(compiled) == 9


def test_an_empty_header_chord_in_a_chain_runs_its_body_after_the_member_before_with_an_empty_list():
    compiled = compile_canvas(chain(s("add", 1, 1), chord([], s("xsum", k=5)), s("mul")))
    assert names(compiled) == ["0:add", "2:xsum", "3:mul"]
    assert deps(compiled) == {"0:add": set(), "2:xsum": {"0:add"}, "3:mul": {"2:xsum"}}
    assert inputs(compiled)["2:xsum"] == {"list": []}
    # xsum([], k=5) = 5, then mul(5) = 50: the chain passes the body's result on, not add's.
    assert run(compiled) == 50


def test_a_chord_with_an_empty_header_inside_a_group_names_its_body_pos_1():
    compiled = compile_canvas(group(chord([], s("xsum", k=5)), s("add", 7)))
    assert names(compiled) == ["0.1:xsum", "1:add"]
    assert run(compiled) == [5, 7]


def test_a_chord_with_a_one_member_body_group_returns_a_list_of_one():
    compiled = compile_canvas(chord([s("add", 1), s("add", 2)], group(s("xsum"))))
    assert names(compiled) == ["0.0:add", "0.1:add", "1:xsum"]
    assert run(compiled) == [3]


def test_a_one_member_body_group_passes_its_members_result_not_a_list_down_a_chain():
    # _chain: chain() and | would move mul into the chord's body, as chord | task does.
    compiled = compile_canvas(_chain(chord([s("add", 1), s("add", 2)], group(s("xsum"))), s("mul")))
    assert names(compiled) == ["0.0:add", "0.1:add", "1:xsum", "2:mul"]
    assert inputs(compiled)["2:mul"] == {"result": "1:xsum"}
    assert run(compiled) == 30


def test_a_one_member_body_group_of_a_chain_returns_a_list_of_its_chains_result():
    compiled = compile_canvas(chord([s("add", 1), s("add", 2)], group(chain(s("xsum"), s("mul")))))
    assert names(compiled) == ["0.0:add", "0.1:add", "1:xsum", "2:mul"]
    assert run(compiled) == [30]


def test_a_body_group_whose_only_member_is_a_group_is_that_group_as_celery_flattens_it():
    compiled = compile_canvas(chord([s("add", 1)], group([group(s("xsum"), s("xsum", k=1))])))
    assert names(compiled) == ["0.0:add", "1.0:xsum", "1.1:xsum"]
    assert run(compiled) == [1, 2]


def test_what_follows_a_chord_with_a_several_member_body_group_runs_once_with_their_list():
    # Celery would run the last xsum once per body member; a step runs once, on their list.
    compiled = compile_canvas(_chain(chord([s("add", 1)], group(s("xsum"), s("xsum", k=1))), s("xsum")))
    assert names(compiled) == ["0.0:add", "1.0:xsum", "1.1:xsum", "2:xsum"]
    assert run(compiled) == 3


def test_a_chord_in_a_chain_receives_the_previous_result_in_each_header_member():
    compiled = compile_canvas(chain(s("add", 1, 1), chord([s("add", 1), s("mul")], s("xsum")), s("mul")))
    assert names(compiled) == ["0:add", "1.0:add", "1.1:mul", "2:xsum", "3:mul"]
    assert inputs(compiled)["1.1:mul"] == {"result": "0:add"}
    assert deps(compiled)["3:mul"] == {"2:xsum"}
    assert run(compiled) == 230


def test_a_chain_as_a_chord_body_runs_after_the_header_and_passes_on():
    compiled = compile_canvas(chord([s("add", 1, 1), s("add", 2, 2)], chain(s("xsum"), s("mul"))))
    assert names(compiled) == ["0.0:add", "0.1:add", "1:xsum", "2:mul"]
    assert deps(compiled)["2:mul"] == {"1:xsum"}
    assert run(compiled) == 60


def test_a_chord_inside_a_group_names_its_header_pos_0_i_and_its_body_pos_1():
    compiled = compile_canvas(group(chord([s("add", 1), s("add", 2)], s("xsum")), s("add", 7)))
    assert names(compiled) == ["0.0.0:add", "0.0.1:add", "0.1:xsum", "1:add"]
    assert run(compiled) == [3, 7]


# --- empty groups -------------------------------------------------------------------------
def test_an_empty_top_level_group_runs_nothing_and_returns_an_empty_list():
    compiled = compile_canvas(group([]))
    assert compiled.nodes == []
    assert run(compiled) == []


# In a chain, the installed Celery's meaning: 5.7 and later leave an empty group out (what follows
# gets the result before it; chain() drops it as it builds, a worker skips one still there),
# 5.5 and 5.6 run it as a chord with an empty header (what follows gets []).
def dropped_or_kept(dropped, kept):
    return dropped if EMPTY_GROUPS_IN_CHAINS_DROPPED else kept


@pytest.mark.parametrize("make", [chain, _chain], ids=["chain", "_chain"])
def test_an_empty_group_in_a_chain_is_left_out_or_gives_the_next_member_an_empty_list(make):
    compiled = compile_canvas(make(s("add", 1, 1), group([]), s("pair")))
    assert names(compiled) == dropped_or_kept(["0:add", "1:pair"], ["0:add", "2:pair"])
    assert deps(compiled) == {"0:add": set(), names(compiled)[1]: {"0:add"}}
    assert inputs(compiled)[names(compiled)[1]] == dropped_or_kept({"result": "0:add"}, {"list": []})
    assert run(compiled) == dropped_or_kept([2], [[]])


@pytest.mark.parametrize("make", [chain, _chain], ids=["chain", "_chain"])
def test_an_empty_group_at_the_start_of_a_chain_is_left_out_or_gives_the_next_member_an_empty_list(make):
    compiled = compile_canvas(make(group([]), s("pair", 7)))
    assert names(compiled) == dropped_or_kept(["0:pair"], ["1:pair"])
    assert deps(compiled) == {names(compiled)[0]: set()}
    assert run(compiled) == dropped_or_kept([7], [[], 7])


@pytest.mark.parametrize("make", [chain, _chain], ids=["chain", "_chain"])
def test_a_chain_ending_in_an_empty_group_returns_the_result_before_it_or_an_empty_list(make):
    compiled = compile_canvas(make(s("add", 1, 1), group([])))
    assert names(compiled) == ["0:add"]
    assert run(compiled) == dropped_or_kept(2, [])


@pytest.mark.parametrize("canvas, dropped, kept", [
    # | builds chain(a, chord([], c)) in every version: a chord's empty header is no empty group.
    (lambda: s("add", 1, 1) | group([]) | s("pair"), [[]], [[]]),
    (lambda: _chain(s("add", 1, 1), chord([], s("pair")), s("pair")), [[[]]], [[[]]]),
    (lambda: _chain(s("add", 1, 1), group(s("add", 1), s("add", 2)), group([]), s("pair")), [[3, 4]], [[]]),
    (lambda: _chain(s("add", 1, 1), _chain(group([])), s("pair")), [2], [[]]),
    (lambda: _chain(s("add", 1, 1), _chain(s("mul"), group([])), s("pair")), [20], [[]]),
    # A worker unrolls one one-member group and leaves out the empty group it finds there; a
    # group left after that is a chord's header, which runs even when it flattens to nothing.
    (lambda: _chain(s("add", 1, 1), group([group([])]), s("pair")), [2], [[]]),
    (lambda: _chain(s("add", 1, 1), group([group([group([])])]), s("pair")), [[]], [[]]),
    (lambda: chain(s("add", 1, 1), group([group([])]), s("pair")), [[]], [[]]),
    (lambda: _chain(group([]), group([])), [], []),
    (lambda: group(_chain(s("add", 1, 1), group([])), s("add", 5)), [2, 5], [[], 5]),
    (lambda: chord([s("add", 1)], _chain(group([]), s("pair"))), [[1]], [[]]),
    (lambda: chord([s("add", 1)], _chain(s("pair"), group([]))), [[1]], []),
], ids=["piped", "empty-chord", "after-a-group", "nested-chain-of-it", "ending-a-nested-chain",
        "group-of-one-of-it", "group-of-one-of-a-group-of-one-of-it", "built-by-chain-from-a-group-of-one-of-it",
        "chain-of-them", "ending-a-chain-in-a-group", "starting-a-chord-body", "ending-a-chord-body"])
def test_an_empty_group_in_a_chain_anywhere_means_what_the_installed_celery_runs(canvas, dropped, kept):
    assert run(compile_canvas(canvas())) == dropped_or_kept(dropped, kept)


def test_an_empty_group_inside_a_group_adds_nothing_to_the_list():
    compiled = compile_canvas(group(s("add", 1), group([]), s("add", 2)))
    assert names(compiled) == ["0:add", "2:add"]
    assert run(compiled) == [1, 2]


def test_an_empty_group_in_a_chord_header_adds_nothing_to_the_bodys_list():
    compiled = compile_canvas(chord([s("add", 1), group([])], s("pair")))
    assert run(compiled) == [[1]]


# --- names, routing, options --------------------------------------------------------------
def test_a_top_level_single_signature_is_step_0():
    compiled = compile_canvas(s("add", 1, 2))
    assert names(compiled) == ["0:add"] and compiled.output == Input.of("0:add")


def test_a_signature_binds_its_args_and_kwargs():
    (node,) = compile_canvas(s("mul", 3, y=4)).nodes
    assert (node.operation, node.args, node.kwargs) == ("mul", (3,), {"y": 4})


def test_queue_picks_the_agent_and_no_queue_means_the_managers():
    compiled = compile_canvas(group(s("add", 1).set(queue="host-1"), s("add", 2)))
    assert [node.agent for node in compiled.nodes] == ["host-1", None]


def test_step_replaces_the_generated_name_and_others_still_refer_to_it():
    compiled = compile_canvas(chain(s("add", 1).set(step="first"), s("mul")))
    assert names(compiled) == ["first", "1:mul"]
    assert inputs(compiled)["1:mul"] == {"result": "first"}


def test_only_the_step_options_given_go_to_the_node_options():
    compiled = compile_canvas(group(s("add", 1).set(max_retries=5, timeout=30), s("add", 2)))
    assert [node.options for node in compiled.nodes] == [{"max_retries": 5, "timeout": 30}, {}]


def test_operation_name_of_names_the_operation_and_can_refuse_a_signature():
    def operation_name_of(sig):
        if sig.task != "tasks.add":
            raise GraphError(f"{sig.task} is not an operation")
        return "add"

    assert names(compile_canvas(s("tasks.add", 1), operation_name_of)) == ["0:add"]
    with pytest.raises(GraphError, match="tasks.mul is not an operation"):
        compile_canvas(chain(s("tasks.add", 1), s("tasks.mul")), operation_name_of)


def test_a_serialised_signature_compiles_like_the_signature():
    assert compile_canvas(dict(nested_example_chain())) == compile_canvas(nested_example_chain())


# --- refusals -----------------------------------------------------------------------------
@pytest.mark.parametrize("canvas, message", [
    (chunks(s("add"), [(1, 2), (3, 4)], 1), "chunks is not supported"),
    (xmap(s("add"), [1, 2]), "xmap is not supported"),
    (xstarmap(s("add"), [(1, 2)]), "xstarmap is not supported"),
    (chain(s("add", 1), chunks(s("add"), [(1, 2)], 1)), "chunks is not supported"),
    (dict(xmap(s("add"), [1, 2])), "xmap is not supported"),
    (lambda: None, "not a Celery signature"),
    ("add", "not a Celery signature"),
    (_chain(), "an empty chain cannot run"),
    (_chain(_chain()), "an empty chain cannot run"),
    (group(s("add", 1), _chain()), "an empty chain cannot run"),
    (chord([s("add", 1)], _chain()), "an empty chain cannot run"),
    (chord([s("add", 1)]), "needs a body"),
    (s("add", 1).set(link=s("mul")), "link= .* callbacks are not supported"),
    (s("add", 1).set(link_error=s("mul")), "link_error= .* callbacks are not supported"),
    (s("add", 1).set(countdown=10), "countdown= .* schedules in the database"),
    (s("add", 1).set(eta="2030-01-01T00:00:00"), "eta= .* schedules in the database"),
    (s("add", 1).set(priority=3), "priority= .* not supported"),
    (group(s("add", 1), s("add", 2)).set(queue="host-1"), "queue= on group .* set options on its signatures"),
    (chain(s("add", 1), s("mul"), queue="host-1"), "queue= on chain"),
    (group(s("add", 1).set(step="x"), s("add", 2).set(step="x")), "two steps are named 'x'"),
    (group(s("add", 1).set(step="1:add"), s("add", 2)), "two steps are named '1:add'"),
    (s("add", 1).set(step=""), "non-empty string"),
])
def test_what_switchyard_cannot_run_as_celery_would_is_refused(canvas, message):
    with pytest.raises(GraphError, match=message):
        compile_canvas(canvas)


def test_a_callback_added_with_link_is_refused():
    sig = s("add", 1)
    sig.link(s("mul"))
    with pytest.raises(GraphError, match="callbacks are not supported"):
        compile_canvas(chain(sig, s("mul")))
