"""A workflow's typed parameters: the JSON Schema its function's annotations declare, the check
of a start's parameters against that schema, and the dataclass parameters made from the stored
JSON when the function is called.

The annotations understood, and their schemas (JSON Schema, draft 2020-12):

================================  ===============================================================
``int``                           ``{"type": "integer"}``: not ``true``, not ``3.0``
``float``                         ``{"type": "number"}``: an integer too; not ``true``, not NaN
``str``, ``bool``                 ``{"type": "string"}``, ``{"type": "boolean"}``
``list[X]``, ``tuple[X, ...]``    ``{"type": "array", "items": X}`` (bare ``list``, ``tuple``: any items)
``dict[str, X]``                  ``{"type": "object", "additionalProperties": X}``
``Literal["a", 1, ...]``          ``{"enum": [...]}`` (strings, integers, booleans, None)
``X | Y``, ``Optional[X]``        ``{"anyOf": [X, Y]}``, ``{"anyOf": [X, {"type": "null"}]}``
a dataclass                       an object of its fields (``properties``, ``required``), no others
``Any``, no annotation            ``{}``: any JSON value
================================  ===============================================================

``Annotated[X, ...]`` is ``X``. Any other annotation is refused when the workflow is registered
(``RegistrationError`` naming the workflow, the parameter and the annotation): an annotation
says what the function expects, and one that cannot be checked would be a promise not kept.

The check (:func:`problems`) reads the schema, not the annotations, so what ``GET /workflows``
publishes is exactly what is checked. It is stricter than JSON Schema in two places: an integer
is never ``3.0`` (the function would get a float), and a literal matches a value of its own type
only (``true`` is not ``1``).
"""

import dataclasses
import functools
import inspect
import itertools
import json
import math
import types
import typing

from workflows_app.errors import ParameterError, RegistrationError
from workflows_app.values import printable

#: The most problems one check reports; the rest are counted.
MAX_PROBLEMS = 10
#: How much of a value a problem quotes.
QUOTED = 40

_SCALARS = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}
_LITERAL_TYPES = (str, int, bool, type(None))
SUPPORTED = ("int, float, str, bool, list[...], tuple[..., ...], dict[str, ...], Literal[...], "
             "Optional[...] or X | None, a dataclass, or Any (not checked)")


# --- the schema of a function's annotations ----------------------------------------------------

def schema_of(func, workflow="") -> dict:
    """The JSON Schema of the parameters object of ``func(ctx, **parameters)``: its parameters
    after the first, each required unless it has a default. Raises ``RegistrationError`` for an
    annotation that is not one of :data:`SUPPORTED`."""
    hints = _hints(func, f"workflow {workflow!r}")
    properties, required, others = {}, [], False
    for param in list(inspect.signature(func).parameters.values())[1:]:
        if param.kind == param.VAR_KEYWORD:
            others = True
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        where = f"workflow {workflow!r}, parameter {param.name!r}"
        schema = _schema(hints[param.name], where, ()) if param.name in hints else {}
        if param.default is param.empty:
            required.append(param.name)
        properties[param.name] = _with_default(schema, param.default)
    schema = {"type": "object", "properties": properties, "additionalProperties": others}
    if required:
        schema["required"] = required
    return schema


def _hints(thing, where) -> dict:
    try:
        return typing.get_type_hints(thing)
    except Exception as exc:  # a name not defined yet, a string that is not an expression
        raise RegistrationError(f"{where}: its annotations cannot be resolved ({type(exc).__name__}: {exc}); "
                                "define what they name before the decorator runs") from None


def _schema(annotation, where, seen) -> dict:
    """The schema of one annotation; ``seen``: the dataclasses being described (a dataclass
    that contains itself has no finite schema)."""
    if annotation is typing.Any:
        return {}
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation in (list, tuple) or origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        return {"type": "array", **({"items": _schema(args[0], where, seen)} if args else {})}
    if annotation is dict or origin is dict:
        if args and args[0] is not str:
            raise RegistrationError(f"{where}: {_name(annotation)}: a JSON object's keys are strings, "
                                    "use dict[str, ...]")
        return {"type": "object", **({"additionalProperties": _schema(args[1], where, seen)} if args else {})}
    if origin is typing.Literal:
        odd = [value for value in args if type(value) not in _LITERAL_TYPES]
        if odd:
            raise RegistrationError(f"{where}: {_name(annotation)}: a literal is a string, an integer, a boolean "
                                    f"or None, not {type(odd[0]).__name__}")
        kinds = {_SCALARS[type(value)] for value in args}
        return {**({"type": kinds.pop()} if len(kinds) == 1 else {}), "enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        members = [_schema(arg, where, seen) for arg in args]
        return {} if {} in members else {"anyOf": members}
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return _dataclass_schema(annotation, where, seen)
    raise RegistrationError(f"{where}: the annotation {_name(annotation)} cannot be checked; "
                            f"a workflow parameter is annotated with {SUPPORTED}")


def _dataclass_schema(cls, where, seen) -> dict:
    if cls in seen:
        raise RegistrationError(f"{where}: the dataclass {cls.__qualname__} contains itself, which no JSON "
                                "value can be checked against; annotate that field with Any")
    hints = _hints(cls, f"{where}, dataclass {cls.__qualname__}")
    properties, required = {}, []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        schema = _schema(hints[f.name], f"{where}, field {f.name!r}", (*seen, cls))
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
        properties[f.name] = _with_default(schema, f.default)
    schema = {"type": "object", "title": cls.__name__, "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema


def _with_default(schema, default) -> dict:
    """``schema`` with ``default`` when it is one (not ``inspect.Parameter.empty`` nor
    ``dataclasses.MISSING``) and JSON (a dataclass's as its fields, a tuple as a list)."""
    if default is inspect.Parameter.empty or default is dataclasses.MISSING:
        return schema
    if dataclasses.is_dataclass(default) and not isinstance(default, type):
        default = dataclasses.asdict(default)
    try:
        default = json.loads(json.dumps(default, allow_nan=False))
    except (TypeError, ValueError):  # not JSON: the function's own default, not shown
        return schema
    return {**schema, "default": default}


def _name(annotation) -> str:
    return annotation.__qualname__ if isinstance(annotation, type) else repr(annotation).replace("typing.", "")


# --- the check -----------------------------------------------------------------------------------

def problems(schema, parameters) -> list[str]:
    """What keeps ``parameters`` (a dict) from fitting the object ``schema`` of :func:`schema_of`,
    one sentence each (at most :data:`MAX_PROBLEMS`, then how many more): the unknown parameters,
    the missing ones, then each one of the wrong type, e.g. ``parameter 'n': expected integer,
    got string "three"``."""
    found = list(itertools.islice(_object_problems(schema, parameters, "", "parameter"), MAX_PROBLEMS + 1))
    if len(found) > MAX_PROBLEMS:
        more = sum(1 for _ in _object_problems(schema, parameters, "", "parameter")) - MAX_PROBLEMS
        found[MAX_PROBLEMS:] = [f"and {more} more"]
    return found


def _problems(schema, value, path):
    """Yield each problem of ``value`` against ``schema``, as ``"parameter 'path': ..."``."""
    if "anyOf" in schema:
        yield from _union_problems(schema, value, path)
        return
    kind, expected = _kind(value), schema.get("type")
    if expected is not None and not (kind == expected or (expected == "number" and kind == "integer")):
        yield _wrong(schema, value, path)
        return
    if kind == "number" and not math.isfinite(value):
        yield f"parameter {path!r}: expected {describe(schema)}, got {_got(value)}"
        return
    if "enum" in schema and not any(type(value) is type(choice) and value == choice for choice in schema["enum"]):
        yield _wrong(schema, value, path)
        return
    if kind == "array" and "items" in schema:
        for index, item in enumerate(value):
            yield from _problems(schema["items"], item, f"{path}[{index}]")
    elif kind == "object" and expected == "object":
        yield from _object_problems(schema, value, path, "field")


def _object_problems(schema, value, path, noun):
    """The problems of an object: unknown and missing keys (``noun``: parameter or field),
    then each value against its property's schema (or ``additionalProperties``'), in the order
    the properties are declared."""
    properties, others = schema.get("properties", {}), schema.get("additionalProperties", True)
    where = f"parameter {path!r}: " if path else ""
    unknown = [printable(key) for key in value if key not in properties] if others is False else []
    missing = [name for name in schema.get("required", ()) if name not in value]
    if unknown:
        yield f"{where}unknown {noun}(s): {', '.join(unknown)}"
    if missing:
        yield f"{where}missing required {noun}(s): {', '.join(missing)}"
    # In the order of the declaration, then the others' (a dict's keys, what **kwargs takes).
    for key in [*(key for key in properties if key in value), *(key for key in value if key not in properties)]:
        inner = properties.get(key, others if isinstance(others, dict) else {})
        yield from _problems(inner, value[key], f"{path}.{printable(key)}" if path else printable(key))


def _union_problems(schema, value, path):
    members = schema["anyOf"]
    if any(next(_problems(member, value, path), None) is None for member in members):
        return
    kind = _kind(value)
    same_kind = [member for member in members if _kinds(member) & {kind, "number" if kind == "integer" else kind}]
    if len(same_kind) == 1:  # Optional[Config] given an object: what is wrong inside it
        yield from _problems(same_kind[0], value, path)
    else:
        yield _wrong(schema, value, path)


def _kinds(schema) -> set:
    if "anyOf" in schema:
        return set().union(*map(_kinds, schema["anyOf"]))
    if "type" in schema:
        return {schema["type"]}
    if "enum" in schema:
        return {_kind(choice) for choice in schema["enum"]}
    return {"any"}


def _kind(value) -> str:
    """The JSON type of a value: null, boolean, integer, number, string, array, object; else
    the Python type's name (workflow code may pass anything to a child)."""
    for python, name in _SCALARS.items():
        if type(value) is python:
            return name
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _wrong(schema, value, path) -> str:
    return f"parameter {path!r}: expected {describe(schema)}, got {_got(value)}"


def describe(schema) -> str:
    """What ``schema`` takes, in words: ``integer``, ``one of "a", "b"``, ``array of string``,
    ``object (Config)``, ``integer or null``."""
    if "anyOf" in schema:
        return " or ".join(describe(member) for member in schema["anyOf"])
    if "enum" in schema:
        return "one of " + ", ".join(_json(choice) for choice in schema["enum"])
    kind = schema.get("type", "any JSON value")
    if kind == "array" and schema.get("items"):
        return f"array of {describe(schema['items'])}"
    if kind == "object" and "title" in schema:
        return f"object ({schema['title']})"
    return kind


def _got(value) -> str:
    kind = _kind(value)
    if kind in ("array", "object") or kind not in _SCALARS.values():
        return kind
    if kind == "number" and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("-Infinity" if value < 0 else "Infinity")
    return "null" if kind == "null" else f"{kind} {_json(value)}"


def _json(value) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return printable(text if len(text) <= QUOTED else text[:QUOTED] + "…")


def accepts_text_only(schema) -> bool:
    """True when ``schema`` takes strings and nothing else (``str``, a ``Literal`` of strings):
    a value typed on a command line is then the string itself, never read as JSON."""
    return schema.get("type") == "string"


# --- dataclass parameters as instances -------------------------------------------------------------

def converting(func, schema):
    """``func`` itself when no parameter's annotation holds a dataclass; else a function that calls
    it with those parameters made into their dataclasses (``Config(**value)``, nested ones too,
    ``list[Config]`` as a list of them) from the JSON values that were checked and stored. A value
    that is already an instance is passed as it is. Made from the stored parameters on every run,
    so a replay gets the same instances."""
    hints = _hints(func, "the workflow")
    converters = {name: convert for name, annotation in hints.items()
                  if name in schema["properties"]
                  for convert in [_converter(annotation, schema["properties"][name])] if convert is not None}
    if not converters:
        return func

    @functools.wraps(func)
    def call(*args, **kwargs):
        for name, convert in converters.items():
            if name in kwargs:
                kwargs[name] = convert(kwargs[name], name)
        return func(*args, **kwargs)

    return call


def _converter(annotation, schema):
    """A function ``(value, path) -> value`` that makes the dataclasses ``annotation`` holds, or
    None when it holds none."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        hints = typing.get_type_hints(annotation)
        fields = {name: convert for name, field_schema in schema["properties"].items()
                  for convert in [_converter(hints[name], field_schema)] if convert is not None}
        return functools.partial(_instance, annotation, schema, fields)
    if args and (origin is list or origin is tuple):
        item = _converter(args[0], schema["items"])
        return item and (lambda value, path: [item(v, f"{path}[{i}]") for i, v in enumerate(value)]
                         if isinstance(value, list) else value)
    if args and origin is dict:
        item = _converter(args[1], schema["additionalProperties"])
        return item and (lambda value, path: {k: item(v, f"{path}.{k}") for k, v in value.items()}
                         if isinstance(value, dict) else value)
    if origin in (typing.Union, types.UnionType) and "anyOf" in schema:
        members = [(member, _converter(arg, member)) for arg, member in zip(args, schema["anyOf"])]
        if any(convert for _, convert in members):
            return functools.partial(_first_fitting, members)
    return None


def _instance(cls, schema, fields, value, path):
    if not isinstance(value, dict):
        return value
    wrong = list(itertools.islice(_problems(schema, value, path), MAX_PROBLEMS))
    if wrong:  # stored by an older version of the code
        raise ParameterError(f"{cls.__qualname__} cannot be made of the stored parameters: {'; '.join(wrong)}")
    return cls(**{key: fields[key](item, f"{path}.{key}") if key in fields else item for key, item in value.items()})


def _first_fitting(members, value, path):
    for schema, convert in members:
        if next(_problems(schema, value, path), None) is None:
            return convert(value, path) if convert else value
    return value
