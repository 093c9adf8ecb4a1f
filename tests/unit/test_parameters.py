"""Typed workflow parameters (``workflows_app.parameters``): the JSON Schema of a workflow
function's annotations, the one check of a start's parameters against it, and the dataclass
parameters made from the stored JSON when the function is called."""

import dataclasses
from typing import Annotated, Any, Literal, Optional

import jsonschema
import pytest

from workflows_app import parameters, registry
from workflows_app.errors import ParameterError, RegistrationError


def schema(func) -> dict:
    return parameters.schema_of(func, "wf")


def param(annotation, **default) -> dict:
    """The schema of one parameter ``x`` of this annotation (and ``default=``)."""
    def wf(ctx, x=default.get("default")):
        pass

    wf.__annotations__ = {"x": annotation}
    if not default:
        wf.__defaults__ = None
    return schema(wf)["properties"]["x"]


def problems(annotation, value) -> list[str]:
    def wf(ctx, x):
        pass

    wf.__annotations__ = {"x": annotation}
    return parameters.problems(schema(wf), {"x": value})


@dataclasses.dataclass
class Disk:
    size_gb: int
    kind: Literal["ssd", "hdd"] = "ssd"


@dataclasses.dataclass
class Server:
    name: str
    disks: list[Disk] = dataclasses.field(default_factory=list)
    boot: Disk | None = None


# --- the schema ----------------------------------------------------------------------------------

@pytest.mark.parametrize("annotation, expected", [
    (int, {"type": "integer"}),
    (float, {"type": "number"}),
    (str, {"type": "string"}),
    (bool, {"type": "boolean"}),
    (type(None), {"type": "null"}),
    (Any, {}),
    (list, {"type": "array"}),
    (list[int], {"type": "array", "items": {"type": "integer"}}),
    (tuple[str, ...], {"type": "array", "items": {"type": "string"}}),
    (dict, {"type": "object"}),
    (dict[str, float], {"type": "object", "additionalProperties": {"type": "number"}}),
    (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
    (Literal[1, "one", None], {"enum": [1, "one", None]}),
    (Optional[int], {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
    (int | None, {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
    (int | str, {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
    (Any | None, {}),
    (Annotated[int, "a note"], {"type": "integer"}),
    (list[dict[str, list[int | None]]], {"type": "array", "items": {"type": "object", "additionalProperties": {
        "type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}}}),
])
def test_each_supported_annotation_has_its_json_schema(annotation, expected):
    assert param(annotation) == expected


def test_a_dataclass_is_an_object_of_its_fields_nested_ones_too():
    assert param(Server) == {
        "type": "object", "title": "Server", "additionalProperties": False, "required": ["name"], "properties": {
            "name": {"type": "string"},
            "disks": {"type": "array", "items": {
                "type": "object", "title": "Disk", "additionalProperties": False, "required": ["size_gb"],
                "properties": {"size_gb": {"type": "integer"},
                               "kind": {"type": "string", "enum": ["ssd", "hdd"], "default": "ssd"}}}},
            "boot": {"anyOf": [param(Disk), {"type": "null"}], "default": None},
        }}


def test_the_object_schema_has_the_parameters_required_and_json_defaults():
    marker = object()

    def wf(ctx, a: int, b: str = "x", c=(1, 2), d: Disk = Disk(10), e=marker, *rest, f: bool = False, **more):
        pass

    assert schema(wf) == {"type": "object", "additionalProperties": True, "required": ["a"], "properties": {
        "a": {"type": "integer"},
        "b": {"type": "string", "default": "x"},
        "c": {"default": [1, 2]},                                   # unannotated: any JSON value
        "d": {**param(Disk), "default": {"size_gb": 10, "kind": "ssd"}},
        "e": {},                                                    # a default that is not JSON is not shown
        "f": {"type": "boolean", "default": False},
    }}

    def closed(ctx):
        pass

    assert schema(closed) == {"type": "object", "properties": {}, "additionalProperties": False}


def test_string_annotations_are_resolved():
    namespace = {}
    exec("from __future__ import annotations\ndef wf(ctx, n: int, tags: list[str] | None = None): pass", namespace)
    assert schema(namespace["wf"])["properties"] == {
        "n": {"type": "integer"},
        "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}], "default": None}}


@pytest.mark.parametrize("annotation", [int, list[Server], dict[str, int | None], Literal["a", 1, True, None],
                                        Server | None, int | str])
def test_every_schema_is_valid_json_schema(annotation):
    jsonschema.Draft202012Validator.check_schema(param(annotation))


class Colour:
    pass


@dataclasses.dataclass
class Node:
    name: str
    children: list["Node"] = dataclasses.field(default_factory=list)


@pytest.mark.parametrize("annotation, says", [
    (Colour, "workflow 'wf', parameter 'x': the annotation test_parameters.Colour cannot be checked; a workflow "
             "parameter is annotated with int, float, str, bool, list[...]"),
    (list[Colour], "parameter 'x': the annotation test_parameters.Colour cannot be checked"),
    (dict[int, str], "parameter 'x': dict[int, str]: a JSON object's keys are strings, use dict[str, ...]"),
    (Literal[1.5], "a literal is a string, an integer, a boolean or None, not float"),
    (tuple[int, str], "the annotation tuple[int, str] cannot be checked"),
    (Node, "the dataclass Node contains itself"),
    ("Undefined", "workflow 'wf': its annotations cannot be resolved (NameError"),
])
def test_an_annotation_that_cannot_be_checked_is_refused_at_registration(annotation, says):
    def wf(ctx, x):
        pass

    wf.__annotations__ = {"x": annotation}
    with pytest.raises(RegistrationError) as refused:
        schema(wf)
    assert says.replace("test_parameters.", "") in str(refused.value).replace("test_parameters.", "")
    with pytest.raises(RegistrationError):
        registry.WorkflowDef(name="wf", func=wf)


# --- the check -------------------------------------------------------------------------------------

@pytest.mark.parametrize("annotation, value, says", [
    (int, "three", "parameter 'x': expected integer, got string \"three\""),
    (int, True, "parameter 'x': expected integer, got boolean true"),
    (int, 3.0, "parameter 'x': expected integer, got number 3.0"),
    (int, None, "parameter 'x': expected integer, got null"),
    (float, False, "parameter 'x': expected number, got boolean false"),
    (float, float("nan"), "parameter 'x': expected number, got NaN"),
    (float, float("-inf"), "parameter 'x': expected number, got -Infinity"),
    (float, "1.5", "parameter 'x': expected number, got string \"1.5\""),
    (str, 5, "parameter 'x': expected string, got integer 5"),
    (str, ["a"], "parameter 'x': expected string, got array"),
    (bool, 1, "parameter 'x': expected boolean, got integer 1"),
    (bool, "true", "parameter 'x': expected boolean, got string \"true\""),
    (list[int], {"a": 1}, "parameter 'x': expected array of integer, got object"),
    (list[int], [1, "2"], "parameter 'x[1]': expected integer, got string \"2\""),
    (dict[str, int], {"a": 1, "b": 2.5}, "parameter 'x.b': expected integer, got number 2.5"),
    (dict, [], "parameter 'x': expected object, got array"),
    (Literal["small", "large"], "huge", "parameter 'x': expected one of \"small\", \"large\", got string \"huge\""),
    (Literal[1, 2], True, "parameter 'x': expected one of 1, 2, got boolean true"),
    (Literal[True], 1, "parameter 'x': expected one of true, got integer 1"),
    (Optional[int], "3", "parameter 'x': expected integer or null, got string \"3\""),
    (int | str, [], "parameter 'x': expected integer or string, got array"),
    (int, "x" * 100, "parameter 'x': expected integer, got string \"" + "x" * 39 + "…"),
    (str, {1, 2}, "parameter 'x': expected string, got set"),
    (Disk, {"size_gb": "big"}, "parameter 'x.size_gb': expected integer, got string \"big\""),
    (Disk, {"size_gb": 1, "colour": "red"}, "parameter 'x': unknown field(s): colour"),
    (Disk, {"kind": "hdd"}, "parameter 'x': missing required field(s): size_gb"),
    (Disk, "big", "parameter 'x': expected object (Disk), got string \"big\""),
    (Server, {"name": "a", "disks": [{"size_gb": 1}, {"size_gb": 2, "kind": "tape"}]},
     "parameter 'x.disks[1].kind': expected one of \"ssd\", \"hdd\", got string \"tape\""),
    (Server | None, {"name": "a", "boot": {"size_gb": None}},  # Optional: what is wrong inside the one that fits
     "parameter 'x.boot.size_gb': expected integer, got null"),
])
def test_a_value_of_the_wrong_type_is_named_with_the_type_expected(annotation, value, says):
    assert problems(annotation, value) == [says]


@pytest.mark.parametrize("annotation, value", [
    (int, 3), (int, -(10**30)), (float, 3), (float, 2.5), (str, ""), (bool, False), (Any, {"a": [None]}),
    (list[int], []), (tuple[int, ...], [1, 2]), (dict[str, list[int]], {"a": [1]}), (Literal["a", 1], 1),
    (Optional[int], None), (int | str, "x"), (Server, {"name": "a", "disks": [{"size_gb": 1, "kind": "hdd"}]}),
    (Server | None, None), (list, [1, "a", None]), (dict, {"a": {}}),
])
def test_a_value_of_the_right_type_has_no_problem(annotation, value):
    assert problems(annotation, value) == []


def test_unknown_and_missing_parameters_come_first_then_each_wrong_one():
    def wf(ctx, n: int, size: Literal["s", "l"], ratio: float = 0.5):
        pass

    assert parameters.problems(schema(wf), {"n": "three", "ratio": "x", "colour": "red"}) == [
        "unknown parameter(s): colour", "missing required parameter(s): size",
        "parameter 'n': expected integer, got string \"three\"", "parameter 'ratio': expected number, got string \"x\""]


def test_a_workflow_that_takes_kwargs_takes_unknown_parameters_of_any_type():
    def wf(ctx, n: int = 1, **more):
        pass

    assert parameters.problems(schema(wf), {"colour": object(), "n": 2}) == []


def test_the_problems_are_counted_past_the_first_ten():
    found = problems(list[str], list(range(25)))
    assert found[:2] == ["parameter 'x[0]': expected string, got integer 0",
                         "parameter 'x[1]': expected string, got integer 1"]
    assert len(found) == 11 and found[-1] == "and 15 more"


def test_check_parameters_raises_one_parameter_error_naming_every_problem():
    def install(ctx, n: int, size="small"):
        pass

    definition = registry.WorkflowDef(name="install", func=install)
    definition.check_parameters({"n": 3, "size": ["any", "json"]})
    with pytest.raises(ParameterError) as refused:
        definition.check_parameters({"n": "three", "colour": "red"})
    assert str(refused.value) == ("workflow 'install': unknown parameter(s): colour; "
                                  "parameter 'n': expected integer, got string \"three\"")
    with pytest.raises(ParameterError, match="^parameters must be an object$"):
        definition.check_parameters(["n"])


@pytest.mark.parametrize("annotation, value, accepted", [
    (int, 3, True), (int, 3.0, False), (int, True, False), (float, 2, True), (float, True, False),
    (list[int], [1, "2"], False), (Literal["a", "b"], "c", False), (Literal[1, 2], True, False),
    (Optional[Disk], {"size_gb": 2}, True), (Optional[Disk], {"size_gb": 2.5}, False),
    (Server, {"name": "x", "disks": [{}]}, False), (dict[str, bool], {"a": 0}, False), (int | str, "x", True),
])
def test_the_check_agrees_with_a_json_schema_validator_but_for_an_integer_written_3_0(annotation, value, accepted):
    """A client validating with the published schema gets the same answer, but for 3.0 as an
    integer: JSON Schema takes it, the check refuses it (the function would get a float)."""
    assert (problems(annotation, value) == []) is accepted
    standard = jsonschema.Draft202012Validator(param(annotation)).is_valid(value)
    assert standard is (accepted or (annotation is int and value == 3.0 and type(value) is float))


# --- dataclass parameters as instances ---------------------------------------------------------

def make_install():
    def install(ctx, server: Server, spare: Disk | None = None, extra: list[Disk] = (), n: int = 1):
        return server, spare, extra, n

    return registry.WorkflowDef(name="install", func=install)


def test_dataclass_parameters_are_made_into_their_dataclasses_when_the_function_is_called():
    definition = make_install()
    stored = {"server": {"name": "web", "disks": [{"size_gb": 10}], "boot": {"size_gb": 1, "kind": "hdd"}},
              "spare": {"size_gb": 5}, "extra": [{"size_gb": 7}], "n": 2}
    server, spare, extra, n = definition.func(None, **stored)
    assert server == Server("web", [Disk(10)], Disk(1, "hdd")) and isinstance(server.disks[0], Disk)
    assert (spare, extra, n) == (Disk(5), [Disk(7)], 2)
    assert stored["server"]["disks"] == [{"size_gb": 10}], "the stored parameters are left as they are"
    assert definition.func(None, server=stored["server"])[1:3] == (None, ()), "a default is the function's own"
    assert definition.func(None, **stored) == definition.func(None, **stored), "a replay gets the same instances"


def test_an_instance_is_passed_as_it_is_and_a_workflow_without_dataclasses_is_its_own_function():
    server = Server("db")
    assert make_install()(None, server=server)[0] is server

    def plain(ctx, n: int, tags: list[str] = ()):
        pass

    assert registry.WorkflowDef(name="plain", func=plain).func is plain


def test_a_stored_value_that_no_longer_fits_the_dataclass_fails_naming_why():
    with pytest.raises(ParameterError, match="Server cannot be made of the stored parameters: parameter "
                                             "'server': missing required field\\(s\\): name"):
        make_install().func(None, server={"disks": []})


def test_the_same_function_registered_again_under_its_name_is_not_a_second_registration(monkeypatch):
    def install(ctx, server: Server):
        pass

    monkeypatch.setitem(registry._workflows, "twice", None)
    registry.workflow(name="twice")(install)
    registry.workflow(name="twice")(install)  # converting wrappers differ; the function is the same
    with pytest.raises(RegistrationError, match="registered twice"):
        registry.workflow(name="twice")(make_install().func)
