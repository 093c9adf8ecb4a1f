"""The documentation is checked like code: docs/ builds with Sphinx without a warning (a broken
link or anchor is one), every ```python block of docs/*.md and README.md runs, every
``manage.py`` command the pages show exists, every ``SWITCHYARD_*`` variable and ``WORKFLOWS``
key they name is a real one, and the first workflow of "Getting started" (docs/examples/) runs
end to end on a real manager and agent with the outcome the page describes. The package's extras
are listed alike wherever they are listed, as pyproject.toml declares them; the pages a new user
installs from say how to get the package before it is on the package index, before they install
it; and the pytest settings the testing page gives make a fresh project's workflow test run.

Snippets run page by page: the blocks of one page in order, in one namespace, inside a test
with Django configured and the test database, and with a registry of workflows of the page's
own, so that the workflows a page defines meet neither the suite's nor another page's.
A ``{literalinclude}`` of a ``.py`` file counts as a Python block of its page, where it stands.
A ``{code-block} python`` directive is not run: it shows a file that runs only in its place (a
package's ``__init__.py`` with a relative import), under a caption naming that file.
"""

import configparser
import os
import re
import subprocess
import sys
import textwrap
import tomllib
import traceback
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest
from celery import _state as celery_state
from django.core.management import get_commands
from django.test import override_settings
from markdown_it import MarkdownIt
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

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
    order = ["getting-started", "concepts", "writing-workflows", "local-steps", "failures", "stopping", "resume", "pausing", "bulk-actions", "children",
             "django-tasks", "api", "admin", "flower", "commands", "configuration", "deploying", "operations", "schedules", "concurrency", "flow-control",
             "metrics", "tracing", "security", "testing",
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


# --- the package's extras, and installing it -------------------------------------------------

#: README is the front door: what a newcomer reads first, whole. The rest goes in docs/.
README_MOST_LINES = 200


def test_the_readme_stays_short():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MOST_LINES, f"README.md has {lines} lines, more than {README_MOST_LINES}: move some to docs/"

GETTING_STARTED = DOCS / "getting-started.md"
#: The pages a new user installs the package from: each lists every extra, in the same table.
PAGES_THAT_LIST_THE_EXTRAS = [README, GETTING_STARTED]
#: A table that lists the extras begins with this header row.
EXTRAS_HEADER = ["extra", "installs", "for"]
#: An extra named in an install command: ``django-switchyard[postgres,flower]``.
EXTRAS_INSTALLED = re.compile(r"django-switchyard\[([^\]]*)\]")
CODE_SPAN = re.compile(r"`([^`]+)`")


def declared_extras() -> dict[str, list[Requirement]]:
    """pyproject.toml's [project.optional-dependencies]: each extra's requirements."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {name: [Requirement(line) for line in lines] for name, lines in project["optional-dependencies"].items()}


def table_rows(text: str):
    """The rows of each Markdown table of a text, as lists of cells (the header row first, the
    delimiter row left out)."""
    table = []
    for line in text.splitlines() + [""]:
        if line.lstrip().startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not all(re.fullmatch(r":?-+:?", cell) for cell in cells):
                table.append(cells)
        elif table:
            yield table
            table = []


def extras_tables(page: Path) -> list[list[list[str]]]:
    """The page's tables of the extras: their rows below the header."""
    return [rows[1:] for rows in table_rows(page.read_text()) if rows[0] == EXTRAS_HEADER]


def installs(cell: str) -> set[tuple[str, frozenset]]:
    """``(name, extras)`` of each requirement a table's "installs" cell names."""
    return {(canonicalize_name(r.name), frozenset(r.extras)) for r in map(Requirement, CODE_SPAN.findall(cell))}


def test_every_extra_a_page_names_is_one_the_package_declares():
    declared = declared_extras()
    unknown = []
    for page in pages():
        named = [extra.strip() for found in EXTRAS_INSTALLED.findall(page.read_text()) for extra in found.split(",")]
        named += [CODE_SPAN.sub(r"\1", row[0]) for table in extras_tables(page) for row in table]
        unknown += [f"{name_of(page)}: [{extra}]" for extra in named if extra not in declared]
    assert not unknown, "extras that pyproject.toml does not declare:\n" + "\n".join(unknown)


def test_the_extras_are_one_list_alike_on_every_page_that_lists_them_as_pyproject_declares_them():
    """README and "Getting started" (and any page with a table headed extra | installs | for)
    list every extra of pyproject.toml, each with the requirements it installs there, in one table
    with the same rows: the same names and meanings everywhere."""
    declared = declared_extras()
    listing = sorted(set(PAGES_THAT_LIST_THE_EXTRAS) | {page for page in pages() if extras_tables(page)})
    tables = {}
    for page in listing:
        found = extras_tables(page)
        assert len(found) == 1, f"{name_of(page)} has {len(found)} tables of the extras, not one"
        tables[name_of(page)] = found[0]
    for where, rows in tables.items():
        names = [CODE_SPAN.sub(r"\1", row[0]) for row in rows]
        assert sorted(names) == sorted(declared), f"{where} lists the extras {names}, pyproject.toml {sorted(declared)}"
        for name, row in zip(names, rows):
            assert installs(row[1]) == {(canonicalize_name(r.name), frozenset(r.extras)) for r in declared[name]}, \
                f"{where}: what [{name}] installs is not what pyproject.toml says: {row[1]}"
            assert row[2], f"{where}: [{name}] says not what it is for"
    first, *others = tables.items()
    for where, rows in others:
        assert rows == first[1], f"{where} lists the extras otherwise than {first[0]}"


#: Says that the package is not on the package index yet, and how to get it until then.
NOT_ON_THE_INDEX = re.compile(r"not on the package index", re.I)
WHEEL = re.compile(r"make wheel|build --wheel")
PIP_INSTALL_THE_PACKAGE = re.compile(r"""pip install\s+["']?django-switchyard\b""")


@pytest.mark.parametrize("page", PAGES_THAT_LIST_THE_EXTRAS, ids=name_of)
def test_the_page_says_how_to_get_the_package_before_it_first_installs_it(page):
    """While the package is not on the package index, ``pip install django-switchyard`` finds
    nothing: the page says so, and how to build the wheel to install, before its first install
    command, not after a reader has run it."""
    lines = page.read_text().splitlines()
    installing = [line + offset for content, line in shell_snippets(page)
                  for offset, command in enumerate(content.splitlines()) if PIP_INSTALL_THE_PACKAGE.search(command)]
    assert installing, f"{name_of(page)} installs the package nowhere"
    before = "\n".join(lines[:min(installing) - 1])
    assert NOT_ON_THE_INDEX.search(before) and WHEEL.search(before), \
        f"{name_of(page)} installs the package (line {min(installing)}) before it says that it is not on the " \
        "package index yet and how to build the wheel"


WHEEL_FILE = re.compile(r"django_switchyard-([^-/\s]+)-py3-none-any\.whl")


def test_every_wheel_a_page_names_is_the_one_make_wheel_writes():
    """``dist/django_switchyard-<version>-py3-none-any.whl``, of pyproject.toml's version."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    other = sorted({f"{name_of(page)}: {found}" for page in pages()
                    for found in WHEEL_FILE.findall(page.read_text()) if found != version})
    assert not other, f"wheels of another version than pyproject.toml's {version}:\n" + "\n".join(other)


# --- a fresh project's pytest settings, as the testing page gives them ------------------------

TESTING = DOCS / "testing.md"


def blocks_of_the_testing_page():
    """``(info, content)`` of each fenced block of the testing page, in order."""
    return [(info.split(maxsplit=1)[0] if info else "", content) for info, content, _ in fences(TESTING.read_text())]


def pytest_settings_blocks() -> dict[str, str]:
    """The testing page's pytest settings: ``{"ini": …, "toml": …}``, its blocks of those
    languages that set ``DJANGO_SETTINGS_MODULE``."""
    return {info: content for info, content in blocks_of_the_testing_page()
            if info in ("ini", "toml") and "DJANGO_SETTINGS_MODULE" in content}


def test_the_testing_page_gives_the_pytest_settings_before_its_first_test():
    blocks = blocks_of_the_testing_page()
    first_test = next(index for index, (info, content) in enumerate(blocks)
                      if info in PYTHON_INFO and re.search(r"^def test_", content, re.M))
    settings = [index for index, (info, content) in enumerate(blocks)
                if info in ("ini", "toml") and "DJANGO_SETTINGS_MODULE" in content]
    assert settings and settings[0] < first_test, \
        "the testing page shows a test before the pytest settings (DJANGO_SETTINGS_MODULE) a project needs"
    ini = configparser.ConfigParser()
    ini.read_string(pytest_settings_blocks()["ini"])
    assert ini["pytest"]["DJANGO_SETTINGS_MODULE"] == "mysite.settings"
    toml = tomllib.loads(pytest_settings_blocks()["toml"])
    assert toml["tool"]["pytest"]["ini_options"]["DJANGO_SETTINGS_MODULE"] == "mysite.settings"


#: Appended to the settings.py of ``django-admin startproject``: Switchyard's apps, as "Getting
#: started" adds them; a broker that the fixture never reaches; the project's workflows.
FRESH_SETTINGS = """
INSTALLED_APPS += ["rest_framework", "rest_framework.authtoken", "django_filters", "drf_spectacular",
                   "workflows_app", "agents"]
CELERY_BROKER_URL = "memory://"
SWITCHYARD_WORKFLOW_MODULES = ["mysite.workflows"]
"""
FRESH_WORKFLOWS = """
from workflows_app.sdk import operation, workflow


@operation
def double(ctx, number):
    return 2 * number


@workflow
def doubling(ctx, number):
    ctx.set_payload({"doubled": ctx.await_execute("double", double, number)})
"""
FRESH_TEST = """
from mysite.workflows import doubling


def test_doubling(switchyard):
    result = switchyard.run(doubling, {"number": 21})
    assert result.status == "completed"
    assert result.payload == {"doubled": 42}
"""
#: Where each kind of the testing page's pytest settings goes: beside manage.py.
SETTINGS_FILES = {"ini": "pytest.ini", "toml": "pyproject.toml"}


def fresh_project(directory: Path) -> Path:
    """A project as ``django-admin startproject mysite .`` writes it, with Switchyard's apps, a
    workflows module and a test of it beside manage.py, and no pytest settings."""
    directory.mkdir()
    subprocess.run([sys.executable, "-m", "django", "startproject", "mysite", str(directory)], check=True,
                   capture_output=True, timeout=60, env=bare_env())
    with open(directory / "mysite" / "settings.py", "a") as settings:
        settings.write(FRESH_SETTINGS)
    (directory / "mysite" / "workflows.py").write_text(textwrap.dedent(FRESH_WORKFLOWS))
    (directory / "test_workflows.py").write_text(textwrap.dedent(FRESH_TEST))
    return directory


def bare_env() -> dict[str, str]:
    """This process's environment less what configures Django, pytest, Switchyard or its services,
    with this repository on the path: the package as a project that installed it sees it."""
    env = {name: value for name, value in os.environ.items()
           if name in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def run_pytest(project: Path) -> subprocess.CompletedProcess:
    """pytest in the project, with Switchyard's plugin: an installed package registers it through
    its entry point; this repository is on the path only, so it is named."""
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "workflows_app.testing", "-p", "no:cacheprovider",
                           "-q"], cwd=project, env=bare_env(), capture_output=True, text=True, timeout=300)


def test_a_fresh_project_without_pytest_settings_stops_at_collection_as_the_testing_page_says(tmp_path):
    run = run_pytest(fresh_project(tmp_path / "mysite"))
    assert run.returncode != 0
    assert "ImproperlyConfigured: Requested setting INSTALLED_APPS, but settings are not configured" in run.stdout, \
        run.stdout[-4000:]
    assert "django.core.exceptions.ImproperlyConfigured: Requested setting INSTALLED_APPS, but settings are" \
        in " ".join(TESTING.read_text().split())


@pytest.mark.parametrize("kind", sorted(SETTINGS_FILES))
def test_the_testing_pages_pytest_settings_run_a_fresh_projects_workflow_test(kind, tmp_path):
    project = fresh_project(tmp_path / "mysite")
    (project / SETTINGS_FILES[kind]).write_text(pytest_settings_blocks()[kind])
    run = run_pytest(project)
    assert run.returncode == 0, f"{run.stdout[-4000:]}\n{run.stderr[-2000:]}"
    assert "1 passed" in run.stdout
