"""The pure graph model: inputs and their resolution, validation, order and readiness.
No database."""

import pytest

from workflows_app.engine.graph import GraphError, Input, NodeSpec, ready, resolve, topological_order, validate


def node(name, *depends_on, input=None):
    return NodeSpec(name=name, operation="op", depends_on=tuple(depends_on), input=input)


# --- inputs -------------------------------------------------------------------------------
def test_an_input_of_one_result_round_trips_through_json():
    assert Input.of("a").to_json() == {"result": "a"}
    assert Input.from_json({"result": "a"}) == Input.of("a")


def test_a_nested_list_input_round_trips_through_json():
    data = {"list": [{"result": "a"}, {"list": [{"result": "b"}, {"result": "c"}]}]}
    assert Input.from_json(data).to_json() == data


@pytest.mark.parametrize("junk", [None, "a", {}, {"result": 1}, {"list": "a"}, {"result": "a", "list": []}])
def test_from_json_refuses_what_is_not_an_input(junk):
    with pytest.raises(GraphError, match="not an input"):
        Input.from_json(junk)


def test_an_input_is_either_a_result_or_a_list_never_both_nor_neither():
    with pytest.raises(GraphError):
        Input()
    with pytest.raises(GraphError):
        Input(result="a", items=())


def test_an_input_names_the_nodes_it_reads_in_order_each_once():
    data = {"list": [{"result": "b"}, {"list": [{"result": "a"}, {"result": "b"}]}]}
    assert Input.from_json(data).names() == ("b", "a")


def test_resolve_gives_one_nodes_result():
    assert resolve({"result": "a"}, {"a": 3, "b": 4}) == 3


def test_resolve_keeps_a_result_of_none():
    assert resolve({"result": "a"}, {"a": None}) is None


def test_resolve_gives_a_list_in_the_inputs_order_nested_as_the_input_is():
    data = {"list": [{"result": "b"}, {"list": [{"result": "a"}, {"result": "c"}]}]}
    assert resolve(data, {"a": 1, "b": 2, "c": 3}) == [2, [1, 3]]


def test_resolve_accepts_an_input_object():
    assert resolve(Input.list_of([Input.of("a")]), {"a": 1}) == [1]


def test_resolve_refuses_an_input_that_reads_a_node_without_a_result():
    with pytest.raises(GraphError, match="'missing'"):
        resolve({"list": [{"result": "a"}, {"result": "missing"}]}, {"a": 1})


# --- validate -----------------------------------------------------------------------------
def test_a_dag_is_valid():
    validate([node("a"), node("b", "a"), node("c", "a"), node("d", "b", "c", input=Input.of("b"))])


def test_two_nodes_with_one_name_are_refused():
    with pytest.raises(GraphError, match="two steps are named 'a'"):
        validate([node("a"), node("b"), node("a")])


def test_a_dependency_on_an_unknown_node_is_refused_and_named():
    with pytest.raises(GraphError, match="'b' depends on unknown step.*'ghost'"):
        validate([node("a"), node("b", "a", "ghost")])


def test_a_dependency_on_a_node_stored_before_is_allowed():
    validate([node("b", "a")], known={"a"})


def test_a_node_depending_on_itself_is_refused():
    with pytest.raises(GraphError, match="'a' depends on itself"):
        validate([node("a", "a")])


def test_a_cycle_is_refused_and_its_nodes_are_named():
    # "after" waits on the cycle and is given first, so it is the first node left unordered.
    nodes = [node("after", "c"), node("root"), node("a", "root", "c"), node("b", "a"), node("c", "b")]
    with pytest.raises(GraphError, match="cycle") as raised:
        validate(nodes)
    message = str(raised.value)
    assert all(f"'{name}'" in message for name in ("a", "b", "c"))
    assert "'root'" not in message and "'after'" not in message


def test_an_input_reading_a_node_it_does_not_depend_on_is_refused():
    with pytest.raises(GraphError, match="'b' reads 'a' without depending on it"):
        validate([node("a"), node("b", input=Input.of("a"))])


# --- order and readiness ------------------------------------------------------------------
def test_topological_order_puts_every_node_after_its_dependencies():
    order = topological_order([node("d", "b", "c"), node("b", "a"), node("c", "a"), node("a")])
    assert order.index("a") < order.index("b") < order.index("d")
    assert order.index("c") < order.index("d")


def test_topological_order_breaks_ties_in_the_given_order():
    nodes = [node("c"), node("a"), node("b", "c"), node("e"), node("d", "a")]
    assert topological_order(nodes) == ["c", "a", "b", "e", "d"]


def test_topological_order_counts_a_known_dependency_as_met():
    assert topological_order([node("b", "a"), node("c")], known={"a"}) == ["b", "c"]


def test_topological_order_refuses_a_cycle():
    with pytest.raises(GraphError, match="cycle"):
        topological_order([node("a", "b"), node("b", "a")])


def test_ready_at_first_gives_the_nodes_without_dependencies_in_the_given_order():
    nodes = [node("b"), node("c", "a", "b"), node("a")]
    assert ready(nodes, done=set()) == ["b", "a"]


def test_ready_waits_for_every_dependency_of_a_fan_in():
    nodes = [node("a"), node("b"), node("c", "a", "b")]
    assert ready(nodes, done={"a"}) == ["b"]
    assert ready(nodes, done={"a", "b"}) == ["c"]


def test_ready_leaves_out_nodes_already_done():
    assert ready([node("a"), node("b", "a")], done={"a", "b"}) == []
