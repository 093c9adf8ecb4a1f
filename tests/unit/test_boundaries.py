"""The direction of imports (README "Architecture"), read from the source: the two apps
never import this repository's ``switchyard`` project; ``agents`` (the worker side) sits on top of
``workflows_app``, which never imports it; and inside, each layer imports only its own layer and
those below — entry points over the worker runtime over services over the engine over the
broker calls over transitions over models. Every import counts, a function's too."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APPS = ("workflows_app", "agents")

#: Layers, lowest first; a module belongs to the layer of its longest matching prefix.
LAYERS = [
    ("base", ["workflows_app.states", "workflows_app.errors", "workflows_app.conf", "workflows_app.embedded_redis",
              "workflows_app.clock",
              "workflows_app.outages", "workflows_app.local_files", "workflows_app.values", "workflows_app.wire",
              "workflows_app.parameters", "workflows_app.tasks_framework", "workflows_app.flow",
              # Tracing's parts below the models (Execution.trace_context's default is one)...
              "workflows_app.tracing.otel", "workflows_app.tracing.ids", "workflows_app.tracing.context",
              "workflows_app.tracing.logs", "workflows_app.tracing.attempts"]),
    ("models", ["workflows_app.models", "workflows_app.db", "workflows_app.registry", "workflows_app.permissions",
                "workflows_app.signing",
                "agents.models",
                "workflows_app.migrations", "agents.migrations"]),
    ("transitions", ["workflows_app.transitions", "workflows_app.signals",
                     # ...and the execution's span, which follows the signal of its end.
                     "workflows_app.tracing"]),
    ("broker", ["workflows_app.broker"]),
    ("engine", ["workflows_app.engine", "workflows_app.flow.gate", "workflows_app.flow.idempotency",
                "workflows_app.pausing", "workflows_app.local_steps"]),
    ("services", ["workflows_app.services", "workflows_app.queries", "workflows_app.retention",
                  "workflows_app.metrics", "workflows_app.schedules", "workflows_app.task_runs",
                  "agents.intake", "agents.accounts", "agents.warnings", "agents.metrics", "workflows_app.flow.waiting",
                  "workflows_app.bulk"]),
    ("worker runtime", ["agents.worker"]),
    ("entry points", ["workflows_app.api", "workflows_app.admin", "workflows_app.templatetags", "workflows_app.management",
                      "workflows_app.tasks",
                      "workflows_app.checks", "workflows_app.environment", "workflows_app.apps", "workflows_app.sdk",
                      "workflows_app.examples", "workflows_app.django_tasks",
                      "workflows_app.bulk.selection", "workflows_app.bulk.command",  # the API's filters; the commands'
                      "agents.runner", "agents.tasks", "agents.management", "agents.admin", "agents.api", "agents.apps", "agents.signals"]),
    # The test harness plays the managers and the agents in a test's process: it stands on both.
    ("test harness", ["workflows_app.testing"]),
]
RANK = {name: rank for rank, (_, prefixes) in enumerate(LAYERS) for name in prefixes}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules():
    return {module_name(path): path for app in APPS for path in sorted((ROOT / app).rglob("*.py"))}


def imports(name, path) -> set[str]:
    """Every module ``name`` imports, at the top or in a function (relative imports resolved)."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def layer(name):
    prefixes = [prefix for prefix in RANK if name == prefix or name.startswith(prefix + ".")]
    return RANK[max(prefixes, key=len)] if prefixes else None


GRAPH = {name: imports(name, path) for name, path in modules().items()}


def test_every_module_of_the_apps_has_a_layer():
    assert [name for name in GRAPH if name not in APPS and layer(name) is None] == []


def test_no_module_of_the_apps_imports_the_switchyard_project():
    assert {name: sorted(i for i in found if i.split(".")[0] == "switchyard") for name, found in GRAPH.items()
            if any(i.split(".")[0] == "switchyard" for i in found)} == {}


def test_workflows_app_never_imports_agents():
    """But for its test harness, which plays the agents too."""
    assert {name: sorted(i for i in found if i.split(".")[0] == "agents") for name, found in GRAPH.items()
            if name.startswith("workflows_app") and layer(name) != RANK["workflows_app.testing"] and any(i.split(".")[0] == "agents" for i in found)} == {}


@pytest.mark.parametrize("name", sorted(n for n in GRAPH if layer(n) is not None))
def test_a_module_imports_only_its_own_layer_and_those_below(name):
    upward = sorted(i for i in GRAPH[name] if i.split(".")[0] in APPS and (layer(i) or -1) > layer(name))
    assert upward == [], f"{name} ({LAYERS[layer(name)][0]}) imports from above: " + ", ".join(
        f"{i} ({LAYERS[layer(i)][0]})" for i in upward)


def test_the_rule_sees_an_upward_import(tmp_path):
    """The checker itself: an engine module importing a service is found, also inside a function."""
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    from workflows_app import services\n")
    found = imports("workflows_app.engine.probe", source)
    assert "workflows_app.services" in found and layer("workflows_app.services") > layer("workflows_app.engine.probe")


#: Celery's calls that talk to the broker: sending, broadcasting, asking, connecting.
BROKER_CALLS = {"send_task", "apply_async", "delay", "broadcast", "revoke", "inspect", "connection_for_read",
                "connection_for_write", "producer_or_acquire", "producer_pool", "connection"}


def broker_calls(path) -> list[str]:
    """Calls of those names, but for ``broker.<name>(...)``: the broker module's own functions."""
    return sorted({f"{node.func.attr} (line {node.lineno})" for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in BROKER_CALLS
                   and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "broker")})


def test_every_broker_call_is_in_the_broker_package():
    assert {name: calls for name, path in modules().items() if layer(name) != RANK["workflows_app.broker"]
            for calls in [broker_calls(path)] if calls} == {}


def test_the_broker_rule_sees_a_broadcast(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text("from celery import current_app\ncurrent_app.control.broadcast('x')\n")
    assert broker_calls(source) == ["broadcast (line 2)"]


# --- no cycles, no hidden imports -----------------------------------------------------------

def module_graph():
    """Who imports whom among the apps' own modules. ``from package import module`` counts as
    importing that module, not the package: a sibling is no cycle through its package."""
    graph = {}
    for name, found in GRAPH.items():
        graph[name] = {i for i in found if i in GRAPH and not any(other.startswith(i + ".") for other in found)}
    return graph


def cycles(graph):
    """The groups of modules that import each other, directly or not (Tarjan's components)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                group.append(other)
                if other == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_two_modules_of_the_apps_import_each_other():
    assert cycles(module_graph()) == []


def test_the_cycle_rule_sees_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def inner_imports(path) -> list[str]:
    """The imports of the apps' own modules made inside a function or a class."""
    tree = ast.parse(path.read_text())
    top = {id(node) for node in tree.body}
    return sorted(f"{ast.unparse(node)} (line {node.lineno})" for node in ast.walk(tree)
                  if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top
                  and any(name.split(".")[0] in APPS for name in
                          ([node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names])))


def test_only_an_apps_ready_imports_the_apps_modules_inside_a_function():
    """Django's one place for it (``AppConfig.ready``: models must be loaded first), and the
    pytest plugin's fixture (pytest loads a plugin before pytest-django sets Django up); anywhere
    else an import inside a function hides a dependency, or a cycle."""
    assert {name: found for name, path in modules().items() if not name.endswith(".apps")
            and name != "workflows_app.testing"
            for found in [inner_imports(path)] if found} == {}


# --- the engine's front door ----------------------------------------------------------------

def private_names(path) -> set[str]:
    """The underscore names a module defines: its functions, classes, methods and attributes."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


OWN_PRIVATE = set().union(*(private_names(path) for path in modules().values()))


def reaches_into(path) -> list[str]:
    """Where a module uses an underscore member of the apps' own that it does not define itself
    (``self.`` and ``cls.`` are the object's own; Django's and Celery's are theirs)."""
    mine = private_names(path)
    return sorted(f"{ast.unparse(node)} (line {node.lineno})" for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.Attribute) and node.attr in OWN_PRIVATE and node.attr not in mine
                  and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")))


def test_no_module_reaches_into_another_modules_private_members():
    """What one module needs of another is a named function or attribute: the dispatcher, live
    runs, handles and the failure mode use the replay run (``engine.replay.Replay``) only
    through its public methods."""
    assert {name: found for name, path in modules().items() for found in [reaches_into(path)] if found} == {}


def test_the_private_rule_sees_a_reach_into_the_replay(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text("def f(run):\n    return run.replay._unhandled\n")
    assert reaches_into(source) == ["run.replay._unhandled (line 2)"]


#: The replay run and what carries it: the engine's own, never imported from outside it.
ENGINE_INSIDE = ("workflows_app.engine.replay", "workflows_app.engine.live", "workflows_app.engine.handles")


def test_only_the_engine_imports_the_replay_run():
    assert {name: sorted(i for i in found if i in ENGINE_INSIDE) for name, found in GRAPH.items()
            if not name.startswith("workflows_app.engine") and any(i in ENGINE_INSIDE for i in found)} == {}


# --- state groups ---------------------------------------------------------------------------

STATE_ENUMS = {"ExecutionStatus", "OperationState", "_E", "_O"}


def state_groups(path) -> list[str]:
    """Module-level names bound to a set, tuple or list of statuses or states: groups, which
    belong in ``workflows_app/states.py`` (a mapping from a status to something else does not)."""
    found = []
    for node in ast.parse(path.read_text()).body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        members = [n for n in ast.walk(node.value)
                   if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in STATE_ENUMS]
        collection = isinstance(node.value, (ast.Set, ast.Tuple, ast.List, ast.BinOp)) or (
            isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
            and node.value.func.id in ("frozenset", "set", "tuple"))
        if members and collection:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [f"{ast.unparse(target)} (line {node.lineno})" for target in targets]
    return found


def test_every_group_of_statuses_or_states_is_in_the_states_module():
    assert {name: found for name, path in modules().items() if name != "workflows_app.states"
            for found in [state_groups(path)] if found} == {}


def test_the_group_rule_sees_a_group(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text("HOLDING = frozenset({ExecutionStatus.STARTED})\nNAMES = {ExecutionStatus.FAILED: 'x'}\n")
    assert state_groups(source) == ["HOLDING (line 1)"]
