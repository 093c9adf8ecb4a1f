"""The project's set-up: migrations in step with the models, Celery configured for
durability, pinned dependencies that agree, admin pages that render."""

import re
import tomllib
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

from agents.models import Agent
from switchyard.celery import app
from workflows_app.states import ExecutionStatus, OperationState

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.django_db
def test_migrations_are_in_step_with_the_models():
    # Exits (SystemExit 1) when a model change has no migration.
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def test_celery_is_configured_for_durability():
    conf = app.conf
    assert conf.task_acks_late is True
    assert conf.worker_prefetch_multiplier == 1
    assert conf.task_reject_on_worker_lost is True
    assert conf.worker_send_task_events is True
    assert conf.task_send_sent_event is True
    assert conf.task_serializer == "json"
    assert conf.result_serializer == "json"
    assert list(conf.accept_content) == ["json"]


def requirement_lines(path):
    lines = []
    for line in (ROOT / path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-r"):
            lines.append(line)
    return lines


def test_requirements_and_pyproject_agree_and_are_pinned():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert requirement_lines("requirements/base.txt") == project["dependencies"]
    assert requirement_lines("requirements/dev.txt") == project["optional-dependencies"]["dev"]
    for requirement in project["dependencies"] + project["optional-dependencies"]["dev"]:
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+(\[[a-z,]+\])?==[0-9][0-9A-Za-z.]*", requirement), requirement


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
