"""Workflows and operations by name, and the loading of ``SWITCHYARD_WORKFLOW_MODULES``.

``@workflow`` and ``@operation`` (re-exported by :mod:`workflows_app.sdk`) register here at
import. Every process imports the configured modules at start-up (``AppConfig.ready``), so a
name means the same code on the manager, the agents and the API.

A module that cannot be imported (a misspelt name, or an error raised while it runs) does not
stop the process where Django starts it: why is kept, one line each (:func:`module_problems`),
for the system check ``workflows.E005`` (so ``check`` and ``migrate`` report it instead of a
traceback), for ``run_manager`` and ``run_agent``, which refuse to start without their
workflows (:func:`require_workflow_modules`), and for the error of a lookup that finds nothing.
"""

import importlib
import inspect
import os
import traceback
from dataclasses import dataclass, field

from celery import signature
from django.conf import settings

from workflows_app import parameters as typed
from workflows_app.errors import ParameterError, RegistrationError
from workflows_app.flow import limits as limits_module
from workflows_app.flow.limits import Limits
from workflows_app.states import ExecutionStatus, FailureMode

_workflows: dict = {}
_operations: dict = {}
_loaded: set = set()
#: The modules that could not be imported: module -> why, in one line.
_failed: dict = {}

#: The ``concurrency_key`` that names the execution's deployment rather than a parameter.
CONCURRENCY_DEPLOYMENT = "deployment"
#: The setting (and environment variable) that names the workflow modules.
MODULES_SETTING = "SWITCHYARD_WORKFLOW_MODULES"
#: Switchyard's own code, which an import problem does not point at.
_OWN_CODE = tuple(os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep + package + os.sep
                  for package in ("workflows_app", "agents"))


@dataclass(eq=False)
class OperationDef:
    """A registered operation: ``func(ctx, *args, **kwargs)`` run on an agent — or, ``local``,
    inside the manager's pass over its execution (``workflows_app.local_steps``)."""

    name: str
    func: object
    max_retries: int | None = None
    retry_interval: float | None = None
    retry_backoff: float = 1.0
    retry_for: tuple = ()
    timeout: float | None = None
    #: Its rate and concurrency limits (``workflows_app.flow.limits``).
    limits: Limits = limits_module.NONE
    #: Its steps run in the manager's pass, with no agent and no message (a call may say otherwise).
    local: bool = False

    def __call__(self, *args, **kwargs):
        return self.func(*args, **kwargs)

    def s(self, *args, **kwargs):
        """A Celery signature of this operation, for ``ctx.run_canvas``."""
        return signature(self.name, args=args, kwargs=kwargs)

    def si(self, *args, **kwargs):
        """An immutable signature: it does not receive the previous step's result."""
        return signature(self.name, args=args, kwargs=kwargs, immutable=True)


@dataclass(eq=False)
class WorkflowDef:
    """A registered workflow: ``func(ctx, **parameters)`` run by a dispatcher on a manager.

    ``schema`` is the JSON Schema of its parameters, from the function's annotations
    (``workflows_app.parameters``), made when it is registered: an annotation that cannot be
    checked is a ``RegistrationError`` then. When a parameter's annotation holds a dataclass,
    ``func`` is the function called with that parameter made into its dataclass."""

    name: str
    func: object
    failure_mode: str | None = None
    timeout: float | None = None
    on_unhandled: str = "fail"
    #: A permission ("app.codename") that starting this workflow and acting on its executions
    #: need besides the execution's own.
    permission: str | None = None
    #: At most this many of its executions of one key active at once (``engine.concurrency``);
    #: None: no limit.
    concurrency: int | None = None
    #: What the limit counts per: the name of one of its parameters, or "deployment"; None: the
    #: workflow itself.
    concurrency_key: str | None = None
    listeners: dict = field(default_factory=dict)
    #: A further check of the parameters once their types fit (raises ``ParameterError``): a
    #: built-in workflow's (``workflows_app.task_runs``).
    validate: object = None
    schema: dict = field(init=False, repr=False)

    def __post_init__(self):
        self.schema = typed.schema_of(self.func, self.name)
        self.func = typed.converting(self.func, self.schema)
        if self.concurrency_key is not None:
            names = [p["name"] for p in self.parameters()]
            if self.concurrency_key == CONCURRENCY_DEPLOYMENT and CONCURRENCY_DEPLOYMENT in names:
                raise RegistrationError(
                    f"workflow {self.name!r}: concurrency_key {CONCURRENCY_DEPLOYMENT!r} names both the deployment and "
                    f"a parameter; rename the parameter")
            if self.concurrency_key not in (CONCURRENCY_DEPLOYMENT, *names):
                raise RegistrationError(
                    f"workflow {self.name!r}: concurrency_key must be one of its parameters "
                    f"({', '.join(names) or 'none'}) or {CONCURRENCY_DEPLOYMENT!r}, not {self.concurrency_key!r}")

    def __call__(self, *args, **kwargs):
        return self.func(*args, **kwargs)

    def parameters(self) -> list[dict]:
        """The workflow's parameters: name, required, default (the function's signature less ctx)."""
        found = []
        for param in list(inspect.signature(self.func).parameters.values())[1:]:
            if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            required = param.default is param.empty
            found.append({"name": param.name, "required": required, "default": None if required else param.default})
        return found

    def check_parameters(self, parameters: dict):
        """Raise ``ParameterError`` for parameters that do not fit the workflow: a missing required
        or an unknown parameter, or a value of the wrong type (the one check of every start, from
        every entry point), each problem named: ``parameter 'n': expected integer, got string "three"``."""
        if not isinstance(parameters, dict):
            raise ParameterError("parameters must be an object")
        problems = typed.problems(self.schema, parameters)
        if problems:
            raise ParameterError(f"workflow {self.name!r}: " + "; ".join(problems))
        if self.validate is not None:
            self.validate(parameters)

    def _listener(status):
        def register(self, fn):
            self.listeners.setdefault(status, []).append(fn)
            return fn

        register.__name__ = f"on_{status}"
        return register

    on_success = _listener(ExecutionStatus.COMPLETED)
    on_failure = _listener(ExecutionStatus.FAILED)
    on_cancellation = _listener(ExecutionStatus.CANCELLED)
    on_timeout = _listener(ExecutionStatus.TIMED_OUT)
    del _listener


def _register(table, kind, definition):
    existing = table.get(definition.name)
    if existing is not None and inspect.unwrap(existing.func) is not inspect.unwrap(definition.func):
        where = f"{existing.func.__module__}.{existing.func.__qualname__}"
        raise RegistrationError(f"{kind} {definition.name!r} is registered twice (first by {where}); pass name= to tell them apart")
    table[definition.name] = definition
    return definition


def operation(func=None, *, name=None, max_retries=None, retry_interval=None, retry_backoff=1.0, retry_for=(), timeout=None,
              rate_limit=None, rate_key=None, concurrency=None, concurrency_key=None, local=False):
    """Register an operation; works with and without parentheses. ``local``: its steps run
    inside the manager's pass over their execution, with no agent and no broker message
    (``workflows_app.local_steps``); a call may say otherwise. ``rate_limit`` ("10/s", "600/m",
    "1000/h") and ``concurrency`` (N): at most that many attempts sent in any window of the
    period, or sent or started at once, per value of ``rate_key`` / ``concurrency_key`` ("agent",
    or one of its parameters; none: the whole operation), kept by the managers
    (``workflows_app.flow``)."""

    def wrap(fn):
        op_name = name or fn.__name__
        if not isinstance(local, bool):
            raise RegistrationError(f"operation {op_name!r}: local must be True or False, not {local!r}")
        if local and "agent" in (rate_key, concurrency_key):
            raise RegistrationError(f"operation {op_name!r} is local: it runs on no agent, so its limits cannot "
                                    "be kept per agent (rate_key / concurrency_key 'agent')")
        declared = limits_module.check(op_name, fn, rate_limit=rate_limit, rate_key=rate_key,
                                       concurrency=concurrency, concurrency_key=concurrency_key)
        return _register(_operations, "operation", OperationDef(
            name=op_name, func=fn, max_retries=max_retries, retry_interval=retry_interval,
            retry_backoff=retry_backoff, retry_for=tuple(retry_for), timeout=timeout, limits=declared, local=local))

    return wrap(func) if func is not None else wrap


def workflow(func=None, *, name=None, failure_mode=None, timeout=None, on_unhandled="fail", permission=None,
             concurrency=None, concurrency_key=None):
    """Register a workflow; works with and without parentheses. ``permission`` ("app.codename"):
    what starting it and acting on its executions need besides the execution's permissions.
    ``concurrency`` (a positive int): at most this many of its executions active at once per value
    of ``concurrency_key`` — one of its parameters, or "deployment"; without it, of the whole
    workflow — the others wait ``queued`` and start in order (``engine.concurrency``)."""
    if failure_mode is not None and failure_mode not in FailureMode.values:
        raise RegistrationError(f"failure_mode must be one of {FailureMode.values}, not {failure_mode!r}")
    if on_unhandled not in ("fail", "retry"):
        raise RegistrationError(f"on_unhandled must be 'fail' or 'retry', not {on_unhandled!r}")
    if permission is not None and not (isinstance(permission, str) and permission.count(".") == 1
                                       and all(permission.split("."))):
        raise RegistrationError(f"permission must be 'app_label.codename', not {permission!r}")
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                    or concurrency < 1):
        raise RegistrationError(f"concurrency must be a whole number of 1 or more, not {concurrency!r}")
    if concurrency_key is not None and not isinstance(concurrency_key, str):
        raise RegistrationError(f"concurrency_key names one of the workflow's parameters, or 'deployment': "
                                f"not {concurrency_key!r}")
    if concurrency_key is not None and concurrency is None:
        raise RegistrationError(f"concurrency_key={concurrency_key!r} needs concurrency, the limit it counts against")

    def wrap(fn):
        return _register(_workflows, "workflow", WorkflowDef(
            name=name or fn.__name__, func=fn, failure_mode=failure_mode, timeout=timeout, on_unhandled=on_unhandled,
            permission=permission, concurrency=concurrency, concurrency_key=concurrency_key))

    return wrap(func) if func is not None else wrap


def operations() -> dict:
    """The registered operations by name (a copy)."""
    return dict(_operations)


def workflow_modules() -> list[str]:
    """The setting ``SWITCHYARD_WORKFLOW_MODULES`` (a list), else the environment variable of the
    same name (comma-separated), else none. A setting that is not a list of names counts as none
    (:func:`module_problems` says why)."""
    configured = getattr(settings, MODULES_SETTING, None)
    if configured is None:
        configured = [name.strip() for name in os.environ.get(MODULES_SETTING, "").split(",")]
    elif _setting_problem(configured):
        return []
    return [name for name in configured if name]


def _setting_problem(configured) -> str | None:
    if isinstance(configured, (list, tuple)) and all(isinstance(name, str) for name in configured):
        return None
    return (f"{MODULES_SETTING} must be a list of module names, such as [\"shop.workflows\"], "
            f"not {type(configured).__name__} {configured!r}")


def load_workflow_modules(modules=None):
    """Import the workflow modules (:func:`workflow_modules` by default), once each. One that
    cannot be imported is not tried again in this process: why is kept for
    :func:`module_problems`."""
    for module in modules if modules is not None else workflow_modules():
        if module in _loaded or module in _failed:
            continue
        try:
            importlib.import_module(module)
        except Exception as exc:  # whatever the module raises, the process is told in one line
            _failed[module] = _import_problem(module, exc)
        else:
            _loaded.add(module)


def _import_problem(module, exc) -> str:
    """Why ``module`` could not be imported, in one line: the module itself is missing, or what
    it raised while it ran, with the file and line where it did."""
    if isinstance(exc, ModuleNotFoundError) and exc.name and (module == exc.name or module.startswith(exc.name + ".")):
        return f"{MODULES_SETTING} names {module!r}, which cannot be imported: {exc}"
    where, message = "", " ".join(str(exc).split())
    if isinstance(exc, SyntaxError):
        where, message = f" (at {exc.filename}, line {exc.lineno})", exc.msg
    else:
        frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
                  if not frame.filename.startswith(("<frozen ", *_OWN_CODE))]
        if frames:  # the innermost outside importlib and Switchyard: the module's code, or a library it called
            where = f" (at {frames[-1].filename}, line {frames[-1].lineno})"
    return (f"{MODULES_SETTING} names {module!r}, whose import raised "
            f"{type(exc).__name__}{': ' + message if message else ''}{where}")


def module_problems() -> list[str]:
    """What keeps the workflow modules from being loaded, one line each: a setting that is not
    a list of names, and every module that could not be imported."""
    configured = getattr(settings, MODULES_SETTING, None)
    problem = None if configured is None else _setting_problem(configured)
    load_workflow_modules()
    return ([problem] if problem else []) + [_failed[module] for module in workflow_modules() if module in _failed]


def require_workflow_modules():
    """Load the workflow modules, or raise ``RegistrationError`` with why (one line): for a
    process that must not run without its workflows (a manager, an agent)."""
    problems = module_problems()
    if problems:
        raise RegistrationError("; ".join(problems))


def _where_registered() -> str:
    """Where registered workflows and operations come from, for an error that found none."""
    problems = module_problems()
    if problems:
        return "; ".join(problems)
    loaded = [module for module in workflow_modules() if module in _loaded]
    if not loaded:
        return (f"{MODULES_SETTING} names no module: set it to the modules that define your workflows "
                f"and operations, such as [\"shop.workflows\"]")
    return f"the modules loaded from {MODULES_SETTING} are {', '.join(loaded)}"


def get_workflow(name) -> WorkflowDef:
    load_workflow_modules()
    try:
        return _workflows[name]
    except KeyError:
        raise RegistrationError(f"no workflow named {name!r} is registered ({_where_registered()})") from None


def get_operation(name) -> OperationDef:
    load_workflow_modules()
    try:
        return _operations[name]
    except KeyError:
        raise RegistrationError(f"no operation named {name!r} is registered ({_where_registered()})") from None


def operation_name(op) -> str:
    """The registered name of ``op``: an ``OperationDef`` (what ``@operation`` returns) or a name."""
    return _registered_name(op, OperationDef, get_operation, "operation")


def workflow_name(wf) -> str:
    """The registered name of ``wf``: a ``WorkflowDef`` (what ``@workflow`` returns) or a name."""
    return _registered_name(wf, WorkflowDef, get_workflow, "workflow")


def _registered_name(thing, definition, get, kind) -> str:
    if isinstance(thing, definition):
        return thing.name
    if isinstance(thing, str):
        return get(thing).name
    raise RegistrationError(f"{thing!r} is not a registered {kind} (decorate it with @{kind})")


def workflows() -> dict:
    load_workflow_modules()
    return dict(_workflows)
