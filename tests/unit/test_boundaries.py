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
              "workflows_app.outages", "workflows_app.local_files", "workflows_app.values", "workflows_app.wire"]),
    ("models", ["workflows_app.models", "workflows_app.db", "workflows_app.registry", "workflows_app.permissions",
                "workflows_app.signing",
                "agents.models",
                "workflows_app.migrations", "agents.migrations"]),
    ("transitions", ["workflows_app.transitions", "workflows_app.signals"]),
    ("broker", ["workflows_app.dispatch"]),
    ("engine", ["workflows_app.engine"]),
    ("services", ["workflows_app.services", "workflows_app.queries", "workflows_app.retention",
                  "agents.intake", "agents.accounts", "agents.warnings"]),
    ("worker runtime", ["agents.worker"]),
    ("entry points", ["workflows_app.api", "workflows_app.admin", "workflows_app.management", "workflows_app.tasks",
                      "workflows_app.checks", "workflows_app.environment", "workflows_app.apps", "workflows_app.sdk",
                      "workflows_app.examples",
                      "agents.runner", "agents.tasks", "agents.management", "agents.admin", "agents.api", "agents.apps", "agents.signals"]),
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
    assert {name: sorted(i for i in found if i.split(".")[0] == "agents") for name, found in GRAPH.items()
            if name.startswith("workflows_app") and any(i.split(".")[0] == "agents" for i in found)} == {}


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
    """Calls of those names, but for ``dispatch.<name>(...)``: dispatch's own functions."""
    return sorted({f"{node.func.attr} (line {node.lineno})" for node in ast.walk(ast.parse(path.read_text()))
                   if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in BROKER_CALLS
                   and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "dispatch")})


def test_every_broker_call_is_in_dispatch():
    assert {name: calls for name, path in modules().items() if name != "workflows_app.dispatch"
            for calls in [broker_calls(path)] if calls} == {}


def test_the_broker_rule_sees_a_broadcast(tmp_path):
    source = tmp_path / "probe.py"
    source.write_text("from celery import current_app\ncurrent_app.control.broadcast('x')\n")
    assert broker_calls(source) == ["broadcast (line 2)"]
