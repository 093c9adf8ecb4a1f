"""The documentation is checked like code: docs/ builds with Sphinx without a warning (a broken
link or anchor is one), every ```python block of docs/*.md and README.md runs, every
``manage.py`` command the pages show exists, every ``SWITCHYARD_*`` variable and ``WORKFLOWS``
key they name is a real one, and the first workflow of "Getting started" (docs/examples/) runs
end to end on a real manager and agent with the outcome the page describes.

Snippets run page by page: the blocks of one page in order, in one namespace, inside a test
with Django configured and the test database, and with a registry of workflows of the page's
own, so that the workflows a page defines meet neither the suite's nor another page's.
A ``{literalinclude}`` of a ``.py`` file counts as a Python block of its page, where it stands.
A ``{code-block} python`` directive is not run: it shows a file that runs only in its place (a
package's ``__init__.py`` with a relative import), under a caption naming that file.
"""

import re
import subprocess
import sys
import traceback
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest
from celery import _state as celery_state
from django.core.management import get_commands
from django.test import override_settings
from markdown_it import MarkdownIt

from workflows_app import registry
from workflows_app.conf import DEFAULTS
from workflows_app.engine import listeners
from workflows_app.signals import execution_status_changed

pytestmark = pytest.mark.processes  # the documentation's build


ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"

#: The build CI runs (and ``make docs``): every warning is an error, broken references too.
SPHINX = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-b", "html"]

PYTHON_INFO = {"python", "py", "python3"}
SHELL_INFO = {"sh", "console", "bash", "shell"}
#: The module "Getting started" includes as the first workflow, and its import name.
FIRST_WORKFLOW = DOCS / "examples" / "first_workflow.py"
FIRST_WORKFLOW_MODULE = "docs.examples.first_workflow"

_markdown = MarkdownIt("commonmark")


def pages() -> list[Path]:
    """Every page of the documentation, and the README."""
    return sorted(DOCS.glob("*.md")) + [README]


def name_of(page: Path) -> str:
    return str(page.relative_to(ROOT))


# --- reading pages -----------------------------------------------------------------------

def fences(text: str, offset: int = 0):
    """``(info, content, line)`` of every fenced block of a Markdown text, in order: ``line`` is
    the 1-based line of the block's first content line. A MyST directive (```` ```{name} ````) is
    itself a fence: the fences in its body are yielded after it."""
    for token in _markdown.parse(text):
        if token.type != "fence":
            continue
        first_line = offset + token.map[0] + 2
        info = token.info.strip()
        yield info, token.content, first_line
        if info.startswith("{"):
            yield from fences(token.content, first_line - 1)


def directive(info: str):
    """``("literalinclude", "examples/x.py")`` of ```` ```{literalinclude} examples/x.py ````."""
    match = re.match(r"\{([\w-]+)\}\s*(.*)", info)
    return (match.group(1), match.group(2).strip()) if match else (None, "")


def python_snippets(page: Path):
    """``(where, code, line)`` of each Python block of the page, in order; a literalinclude of a
    ``.py`` file gives that file's whole text (``where`` is the file then)."""
    for info, content, line in fences(page.read_text()):
        name, argument = directive(info)
        if name == "literalinclude" and argument.endswith(".py"):
            included = (DOCS / argument.lstrip("/")) if argument.startswith("/") else (page.parent / argument)
            yield name_of(included), included.read_text(), 1
        elif info.split(maxsplit=1)[:1] and info.split(maxsplit=1)[0] in PYTHON_INFO:
            yield name_of(page), content, line


def shell_snippets(page: Path):
    for info, content, line in fences(page.read_text()):
        if info.split(maxsplit=1)[:1] and info.split(maxsplit=1)[0] in SHELL_INFO:
            yield content, line


def inline_code(page: Path) -> list[str]:
    """The text of every inline code span of the page (`like this`), outside fenced blocks."""
    found = []

    def walk(tokens):
        for token in tokens:
            if token.type == "code_inline":
                found.append(token.content)
            if token.children:
                walk(token.children)

    walk(_markdown.parse(page.read_text()))
    return found


# --- the build ---------------------------------------------------------------------------------

def test_the_docs_build_without_a_warning_or_a_broken_link(tmp_path):
    """``sphinx-build -W --keep-going -n``: a page left out of the table of contents, a link to a
    page or a heading anchor that does not exist, a missing image — each fails the build."""
    result = subprocess.run([*SPHINX, str(DOCS), str(tmp_path / "html")], cwd=ROOT, capture_output=True, text=True,
                            timeout=600)
    if result.returncode != 0:
        pytest.fail(f"sphinx-build exited {result.returncode}:\n{result.stderr}\n{result.stdout[-4000:]}", pytrace=False)
    assert (tmp_path / "html" / "index.html").exists()


def test_the_contents_list_every_page_once_in_reading_order():
    order = ["getting-started", "concepts", "writing-workflows", "failures", "stopping", "resume", "children",
             "django-tasks", "api", "admin", "flower", "commands", "configuration", "deploying", "operations", "schedules", "concurrency",
             "metrics", "security", "testing",
             "changing-workflow-code", "benchmarks", "glossary"]
    [toctree] = [content for info, content, _ in fences((DOCS / "index.md").read_text())
                 if directive(info)[0] == "toctree"]
    entries = [line.strip() for line in toctree.splitlines() if line.strip() and not line.startswith(":")]
    assert entries == order


# --- the snippets ------------------------------------------------------------------------

#: The registry's module-level tables: workflows, operations, the modules loaded (and those
#: that failed to load), each replaced by an empty one of its kind.
REGISTRY_TABLES = ("_workflows", "_operations", "_loaded", "_failed")


@contextmanager
def a_registry_of_its_own():
    """Workflows and operations registered inside go to a registry of their own, thrown away on
    exit; nothing of ``SWITCHYARD_WORKFLOW_MODULES`` is loaded into it; status listeners and
    receivers of ``execution_status_changed`` connected inside are dropped; and a Celery app
    made inside (a page's ``celery.py``) does not stay the current one."""
    tables = [name for name in REGISTRY_TABLES if hasattr(registry, name)]
    saved = {name: getattr(registry, name) for name in tables}
    saved_listeners = list(listeners._status_listeners)
    saved_receivers = list(execution_status_changed.receivers)
    saved_app = getattr(celery_state._tls, "current_app", None)
    for name in tables:
        setattr(registry, name, type(saved[name])())
    try:
        with override_settings(SWITCHYARD_WORKFLOW_MODULES=[]):
            yield
    finally:
        for name in tables:
            setattr(registry, name, saved[name])
        listeners._status_listeners[:] = saved_listeners
        with execution_status_changed.lock:
            execution_status_changed.receivers[:] = saved_receivers
            execution_status_changed.sender_receivers_cache.clear()
        celery_state._set_current_app(saved_app)


def pages_with_python():
    return [page for page in pages() if any(python_snippets(page))]


@pytest.mark.parametrize("page", pages_with_python(), ids=name_of)
def test_every_python_block_of_the_page_runs(page, db):
    """The page's blocks in order, in one namespace (a later block uses what an earlier one
    defined); a settings fragment runs as the assignments it is, so it must carry its imports."""
    namespace = {"__name__": f"docs_page_{page.stem.replace('-', '_')}", "__file__": str(page)}
    with a_registry_of_its_own():
        for where, code, line in python_snippets(page):
            # Padded so that a traceback names the page's own line numbers.
            compiled = compile("\n" * (line - 1) + code, where, "exec")
            try:
                exec(compiled, namespace)
            except Exception:
                pytest.fail(f"the Python block at {where}:{line} raised:\n{traceback.format_exc()}", pytrace=False)


MANAGE_PY = re.compile(r"manage\.py\s+([A-Za-z_][\w-]*)")


def test_every_manage_py_command_shown_exists():
    commands = set(get_commands())
    missing = []
    for page in pages():
        for content, line in shell_snippets(page):
            for offset, text in enumerate(content.splitlines()):
                for command in MANAGE_PY.findall(text):
                    if command not in commands:
                        missing.append(f"{name_of(page)}:{line + offset}: manage.py {command}")
    assert not missing, "commands that do not exist:\n" + "\n".join(missing)


SETTING = re.compile(r"\bSWITCHYARD_[A-Z][A-Z0-9_]*\b")
WORKFLOWS_KEY = re.compile(r"""WORKFLOWS\[\s*["']([A-Za-z_]\w*)["']\s*\]""")


def test_every_workflows_key_named_is_a_setting():
    unknown = []
    for page in pages():
        text = page.read_text()
        for key in WORKFLOWS_KEY.findall(text):
            if key not in DEFAULTS:
                unknown.append(f"{name_of(page)}: WORKFLOWS[{key!r}]")
    assert not unknown, "WORKFLOWS keys that are not settings (workflows_app.conf.DEFAULTS):\n" + "\n".join(unknown)


#: Variables of this repository's own test suite, not settings of Switchyard: the testing page
#: describes them, the configuration page need not.
TEST_SUITE_VARIABLES = {"SWITCHYARD_REQUIRE", "SWITCHYARD_SCREENSHOTS", "SWITCHYARD_TEST_MARKERS"}


def test_every_switchyard_variable_named_is_on_the_configuration_page():
    """Every `SWITCHYARD_...` name in a page's inline code is described on the configuration page
    (or, for the test suite's own variables, on the testing page)."""
    configuration, testing = DOCS / "configuration.md", DOCS / "testing.md"
    if not configuration.exists():
        pytest.skip("docs/configuration.md is not written yet")
    documented = set(SETTING.findall(configuration.read_text()))
    if testing.exists():
        documented |= TEST_SUITE_VARIABLES & set(SETTING.findall(testing.read_text()))
    missing = sorted({f"{name_of(page)}: {name}" for page in pages() if page != configuration
                      for code in inline_code(page) for name in SETTING.findall(code) if name not in documented})
    assert not missing, "SWITCHYARD_ variables the configuration page does not describe:\n" + "\n".join(missing)


# --- the first workflow, end to end ----------------------------------------------------------------

def test_getting_started_includes_the_first_workflow_module():
    included = [where for page in [DOCS / "getting-started.md"] if page.exists()
                for where, _, _ in python_snippets(page)]
    assert name_of(FIRST_WORKFLOW) in included


def test_the_readme_shows_the_first_workflow_that_runs_end_to_end():
    """README's first workflow is docs/examples/first_workflow.py (less its docstring): the code the
    test below runs on a real manager and agent."""
    code = FIRST_WORKFLOW.read_text().split('"""', 2)[2].strip()
    assert any(code in content for _, content, _ in python_snippets(README)), \
        f"README's first workflow is not the code of {name_of(FIRST_WORKFLOW)}"


@pytest.fixture
def first_workflow_stack(request, tmp_path, transactional_db, monkeypatch):
    """A stack (tests/integration/harness.py) whose processes, and this one, load the first
    workflow's module only, into a registry of this test's own."""
    from tests.integration.conftest import _failed, assert_every_ended_execution_consistent, engine_settings
    from tests.integration.harness import MARKERS_ENV, Stack, ensure_broker

    suffix = uuid.uuid4().hex[:8]
    workflows = engine_settings(suffix)
    markers = tmp_path / "markers"
    markers.mkdir()
    monkeypatch.setenv("SWITCHYARD_WORKFLOW_MODULES", FIRST_WORKFLOW_MODULE)
    monkeypatch.setenv(MARKERS_ENV, str(markers))
    with a_registry_of_its_own(), override_settings(WORKFLOWS=workflows,
                                                     SWITCHYARD_WORKFLOW_MODULES=[FIRST_WORKFLOW_MODULE]):
        ensure_broker()
        stack = Stack(tmp_path, suffix=suffix, workflows=workflows, markers_dir=markers,
                      extra_env={"SWITCHYARD_WORKFLOW_MODULES": FIRST_WORKFLOW_MODULE})
        try:
            yield stack
        finally:
            stack.close(failed=_failed(request.node))
            sys.modules.pop(FIRST_WORKFLOW_MODULE, None)
        if not _failed(request.node):
            stack.assert_agents_used_no_database()
            assert_every_ended_execution_consistent()


@pytest.mark.integration
def test_the_first_workflow_runs_as_getting_started_says(first_workflow_stack):
    """What docs/getting-started.md says of ``hello``: ``greet`` runs on the agent, fails its
    first attempt (a retry), logs each attempt and returns the greeting; ``shout`` runs on the
    manager; ``start_execution hello --param name=Ada --wait`` exits 0 with ``completed: 2 of 2
    operations done``; the payload holds both results."""
    from tests.integration.harness import NO_DATABASE_URL, assert_operation_events_consistent
    from workflows_app.models import Event, Execution, Operation

    stack = first_workflow_stack
    stack.start_manager()
    agent = stack.agent_name("host-1")
    stack.manage(agent, "run_agent", agent, "--concurrency", "1", env={"DATABASE_URL": NO_DATABASE_URL})
    stack.wait_for_agent(agent)

    start = subprocess.run([sys.executable, "manage.py", "start_execution", "hello", "--param", "name=Ada",
                            "--param", f"agent={agent}", "--wait"], cwd=ROOT, env=stack.env, capture_output=True,
                           text=True, timeout=120)
    assert start.returncode == 0, f"{start.stdout}\n{start.stderr}\n{stack.report_logs()}"
    execution_id, final = start.stdout.strip().splitlines()
    assert final == "completed: 2 of 2 operations done (succeeded=2)"

    execution = Execution.objects.get(pk=execution_id)
    assert execution.status == "completed"
    assert execution.payload == {"greeting": "Hello, Ada!", "loud": "HELLO, ADA!"}
    operations = {op.name: op for op in Operation.objects.filter(execution=execution)}
    assert (operations["greet"].agent, operations["greet"].attempt, operations["greet"].state) == (agent, 2, "succeeded")
    assert (operations["shout"].agent, operations["shout"].state) == (stack.management_queue, "succeeded")
    events = Event.objects.filter(execution=execution)
    assert events.filter(type="task_rescheduled", operation="greet").count() == 1
    assert list(events.filter(type="log", operation="greet").order_by("id").values_list("message", flat=True)) == [
        "attempt 1 to greet Ada", "attempt 2 to greet Ada"]
    assert_operation_events_consistent(execution)
