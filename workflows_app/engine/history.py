"""An execution's history as a JSON document: what a replay of its workflow function needs, and
nothing secret (``manage.py export_execution`` writes it, the replay check reads it).

::

    {"format": "switchyard.history", "version": 1,
     "execution": {"id", "workflow_id", "deployment_id", "parameters", "payload", "status",
                   "failure_mode", "timeout", "error", "is_dry_run", "created_at", "started_at",
                   "ended_at"},
     "steps":   [{"name", "kind", "operation", "args", "kwargs", "input", "agent", "local", "state",
                  "result", "error", "attempt", "current_retries", "max_retries",
                  "retry_interval", "retry_backoff", "timeout", "awaited", "after",
                  "depends_on", "failure_handled"}, ...],            # in the order stored
     "waits":   [{"key", "kind", "name", "timeout", "deadline", "outcome", "payload",
                  "created_at", "resolved_at"}, ...],               # in the order stored
     "patches": {"change-id": true, ...}}                           # ctx.patched's answers

Left out: the execution's token, events and logs, the agents' runs, the signing keys. Times
are ISO 8601 text. :func:`load` stores a history as a new execution, with new ids, in the
caller's transaction: the replay check rolls it back.
"""

from django.db import transaction
from django.utils.dateparse import parse_datetime

from workflows_app import values
from workflows_app.errors import HistoryRefused, ValueRefused
from workflows_app.models import Execution, Operation, OperationDependency, Wait
from workflows_app.states import ExecutionStatus, FailureMode, OperationState, StepKind, WaitKind, WaitOutcome

FORMAT = "switchyard.history"
VERSION = 1

EXECUTION_FIELDS = ("workflow_id", "deployment_id", "parameters", "payload", "status", "failure_mode", "timeout",
                    "error", "is_dry_run")
STEP_FIELDS = ("name", "kind", "operation", "args", "kwargs", "input", "agent", "local", "state", "result", "error", "attempt",
               "current_retries", "max_retries", "retry_interval", "retry_backoff", "timeout", "awaited", "after",
               "failure_handled")
WAIT_FIELDS = ("key", "kind", "name", "timeout", "outcome", "payload")

_NUMBER, _COUNT, _TEXT, _FLAG = (int, float), int, str, bool
#: The type of each field that is not free JSON, where it may be given (null: the default).
TYPES = {
    "execution": {"deployment_id": _TEXT, "timeout": _NUMBER, "error": _TEXT, "is_dry_run": _FLAG},
    "steps": {"agent": _TEXT, "attempt": _COUNT, "current_retries": _COUNT, "max_retries": _COUNT,
              "retry_interval": _NUMBER, "retry_backoff": _NUMBER, "timeout": _NUMBER, "awaited": _FLAG,
              "failure_handled": _FLAG, "local": _FLAG},
    "waits": {"name": _TEXT, "timeout": _NUMBER},
}
#: The longest text of each field the database keeps as text of a bounded length.
LENGTHS = {
    "execution": {"workflow_id": 200, "deployment_id": 200},
    "steps": {"name": 255, "operation": 255, "agent": 200},
    "waits": {"key": 300, "name": 255},
}
#: The JSON values of each part, each checked as it was when it was stored (``values.check``).
JSON_VALUES = {"execution": ("parameters", "payload"), "steps": ("args", "kwargs", "input", "result", "error", "after"),
               "waits": ("payload",)}
#: A history's values are as large as their execution's: no size limit beyond theirs.
NO_LIMIT = 2 ** 62


# --- writing ----------------------------------------------------------------------------------

def export(execution_id) -> dict:
    """The history of the execution ``execution_id`` (``Execution.DoesNotExist`` when there is
    none), read under its row lock: a pass in progress commits first, so the document holds
    what one pass left, never half of one."""
    with transaction.atomic():
        execution = Execution.objects.select_for_update(no_key=True).get(pk=execution_id)
        operations = list(Operation.objects.filter(execution_id=execution.pk).order_by("pending_at", "id"))
        waits = list(Wait.objects.filter(execution_id=execution.pk).order_by("id"))
        edges = list(OperationDependency.objects.filter(operation__execution_id=execution.pk)
                     .values_list("operation_id", "depends_on_id"))
    names = {op.pk: op.name for op in operations}
    depends_on = {}
    for operation_id, dependency_id in edges:
        depends_on.setdefault(operation_id, []).append(names[dependency_id])
    return {
        "format": FORMAT,
        "version": VERSION,
        "execution": {"id": str(execution.pk), **{name: getattr(execution, name) for name in EXECUTION_FIELDS},
                      **{name: _time(getattr(execution, name)) for name in ("created_at", "started_at", "ended_at")}},
        "steps": [{**{name: getattr(op, name) for name in STEP_FIELDS}, "depends_on": sorted(depends_on.get(op.pk, []))}
                  for op in operations],
        "waits": [{**{name: getattr(wait, name) for name in WAIT_FIELDS}, "deadline": _time(wait.deadline),
                   "created_at": _time(wait.created_at), "resolved_at": _time(wait.resolved_at)} for wait in waits],
        "patches": dict(execution.patches or {}),
    }


def _time(value):
    return value.isoformat() if value is not None else None


# --- reading ----------------------------------------------------------------------------------

def parse(document) -> dict:
    """``document`` if it is a history this version reads; else ``HistoryRefused`` saying why."""
    _need(isinstance(document, dict), "a history is a JSON object")
    _need(document.get("format") == FORMAT, f'its "format" is not {FORMAT!r}')
    _need(document.get("version") == VERSION, f'its "version" is {document.get("version")!r}; this version of '
                                              f"Switchyard reads version {VERSION}")
    execution = document.get("execution")
    _need(isinstance(execution, dict), '"execution" is not an object')
    _check_fields(execution, "execution", '"execution"')
    _need(_text(execution.get("workflow_id")), '"execution.workflow_id" is not a non-empty string')
    _need(isinstance(execution.get("parameters", {}), dict), '"execution.parameters" is not an object')
    _need(isinstance(execution.get("payload", {}), dict), '"execution.payload" is not an object')
    _need(execution.get("failure_mode", FailureMode.NO_NEW_CALLS) in FailureMode.values,
          '"execution.failure_mode" is not a failure mode')
    steps, waits, patches = document.get("steps"), document.get("waits", []), document.get("patches", {})
    _need(isinstance(steps, list) and all(isinstance(step, dict) for step in steps), '"steps" is not a list of objects')
    for i, step in enumerate(steps):
        where = f'"steps[{i}]"'
        _check_fields(step, "steps", where)
        _need(_text(step.get("name")), f"{where} has no name")
        _need(_text(step.get("operation")), f"{where} names no operation")
        _need(step.get("kind", StepKind.OPERATION) in StepKind.values, f"{where} has an unknown kind")
        _need(step.get("state") in OperationState.values, f"{where} has an unknown state")
        _need(isinstance(step.get("args", []), list) and isinstance(step.get("kwargs", {}), dict),
              f"{where}: args is not a list, or kwargs not an object")
        _need(isinstance(step.get("after", []), list) and isinstance(step.get("depends_on", []), list),
              f"{where}: after or depends_on is not a list")
    names = [step["name"] for step in steps]
    _need(len(set(names)) == len(names), "two steps have the same name")
    for i, step in enumerate(steps):
        _need(all(dep in names and dep != step["name"] for dep in step.get("depends_on", [])),
              f'"steps[{i}]" depends on a step the history does not hold')
    _need(isinstance(waits, list) and all(isinstance(wait, dict) for wait in waits), '"waits" is not a list of objects')
    for i, wait in enumerate(waits):
        where = f'"waits[{i}]"'
        _check_fields(wait, "waits", where)
        _need(_text(wait.get("key")), f"{where} has no key")
        _need(wait.get("kind") in WaitKind.values and wait.get("outcome", WaitOutcome.WAITING) in WaitOutcome.values,
              f"{where} has an unknown kind or outcome")
        for name in ("deadline", "created_at", "resolved_at"):
            _need(wait.get(name) is None or _datetime(wait[name]) is not None, f"{where}: {name} is not a time")
    keys = [wait["key"] for wait in waits]
    _need(len(set(keys)) == len(keys), "two waits have the same key")
    _need(isinstance(patches, dict) and all(isinstance(answer, bool) for answer in patches.values()),
          '"patches" is not an object of true and false')
    _need(all(not values.string_problem(change_id) for change_id in patches), '"patches" holds a change id no '
                                                                                "database stores")
    return document


def load(document) -> tuple[Execution, list, list]:
    """Store the history ``document`` (:func:`parse` first) as a new execution — new ids,
    ``started``, as a pass sees it while the workflow code runs — in the caller's transaction.
    Returns the execution, its steps and its waits, in the order stored."""
    parse(document)
    source = document["execution"]
    execution = Execution.objects.create(
        workflow_id=source["workflow_id"], deployment_id=source.get("deployment_id"),
        parameters=source.get("parameters", {}), payload=source.get("payload", {}), status=ExecutionStatus.STARTED,
        failure_mode=source.get("failure_mode", FailureMode.NO_NEW_CALLS), timeout=source.get("timeout"),
        is_dry_run=bool(source.get("is_dry_run", False)), patches=document.get("patches", {}),
        created_by="replay check")
    operations = Operation.objects.bulk_create([
        Operation(execution=execution, **{name: step[name] for name in STEP_FIELDS if step.get(name) is not None})
        for step in document["steps"]])
    by_name = {op.name: op for op in operations}
    OperationDependency.objects.bulk_create([
        OperationDependency(operation=by_name[step["name"]], depends_on=by_name[dep])
        for step in document["steps"] for dep in step.get("depends_on", [])])
    waits = Wait.objects.bulk_create([
        Wait(execution=execution, **{name: wait[name] for name in WAIT_FIELDS if wait.get(name) is not None},
             deadline=_datetime(wait.get("deadline")), resolved_at=_datetime(wait.get("resolved_at")))
        for wait in document.get("waits", [])])
    return execution, operations, waits


def _need(condition, reason):
    if not condition:
        raise HistoryRefused(reason)


def _check_fields(fields, part, where):
    """The fields of one part of a history (``execution``, a step, a wait) as the database can
    store them: each of its type, text of its length, JSON values that were storable."""
    for name, kind in TYPES[part].items():
        value = fields.get(name)
        fits = isinstance(value, kind) and (kind is _FLAG or not isinstance(value, bool))
        _need(value is None or fits, f"{where}: {name} is not a {_TYPE_NAMES[kind]}")
        lowest = -1 if name == "max_retries" else 0
        _need(kind is not _COUNT or value is None or lowest <= value < 2 ** 31, f"{where}: {name} is out of range")


    for name, longest in LENGTHS[part].items():
        value = fields.get(name)
        _need(not isinstance(value, str) or (len(value) <= longest and not values.string_problem(value)),
              f"{where}: {name} is longer than {longest} characters, or holds characters no database stores")
    for name in JSON_VALUES[part]:
        try:
            values.check(fields.get(name), f"{where}.{name}", limit=NO_LIMIT)
        except ValueRefused as refused:
            raise HistoryRefused(str(refused)) from None


_TYPE_NAMES = {_NUMBER: "number", _COUNT: "whole number", _TEXT: "string", _FLAG: "boolean"}


def _text(value) -> bool:
    return isinstance(value, str) and bool(value)


def _datetime(value):
    if value is None:
        return None
    try:
        return parse_datetime(value) if isinstance(value, str) else None
    except ValueError:
        return None
