"""What the apps take from the project they are installed in: its Celery app, in
every thread; where its local files go without a setting; which workflow modules it loads."""

import importlib.util
import threading
from pathlib import Path

import pytest
from celery import Celery, current_app
from celery.local import Proxy
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command

from agents.runner import run_operation
from agents.worker import lifecycle
from switchyard.celery import app as project_app
from workflows_app import broker, checks
from workflows_app.api import routes
from workflows_app.conf import var_dir
from workflows_app.management.commands import standalone
from workflows_app.registry import workflow_modules
from workflows_app.tasks import advance


def test_the_projects_celery_app_is_current_in_every_thread():
    """A web server's request threads send through the project's app, not Celery's fallback:
    Celery's Django fix-up makes it the default of every thread, which broker relies on."""
    seen = []
    thread = threading.Thread(target=lambda: seen.append(current_app._get_current_object()))
    thread.start()
    thread.join()
    assert seen == [project_app]
    assert broker.project_app() is project_app and checks.check_celery_app() == []


def test_a_project_without_a_celery_app_fails_its_system_check(monkeypatch):
    fallback = Celery("default", fixups=[], set_as_current=False)  # what Celery makes when nobody did
    monkeypatch.setattr(broker, "current_app", Proxy(lambda: fallback))
    assert broker.project_app() is None
    [error] = checks.check_celery_app()
    assert error.id == "workflows.E003" and "celery.py" in error.hint


def test_local_files_go_where_the_environment_says_else_beside_the_project(monkeypatch, settings, tmp_path):
    monkeypatch.setenv("SWITCHYARD_VAR_DIR", str(tmp_path / "elsewhere"))
    assert var_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv("SWITCHYARD_VAR_DIR")
    settings.BASE_DIR = tmp_path / "project"
    assert var_dir() == tmp_path / "project" / "var"
    del settings.BASE_DIR
    monkeypatch.chdir(tmp_path)
    assert var_dir() == Path(tmp_path).resolve() / "var"


def test_workflow_modules_come_from_the_setting_else_the_environment(monkeypatch, settings):
    monkeypatch.setenv("SWITCHYARD_WORKFLOW_MODULES", "shop.workflows, shop.more ,")
    settings.SWITCHYARD_WORKFLOW_MODULES = ["tests.workflows"]
    assert workflow_modules() == ["tests.workflows"]
    del settings.SWITCHYARD_WORKFLOW_MODULES
    assert workflow_modules() == ["shop.workflows", "shop.more"]
    monkeypatch.delenv("SWITCHYARD_WORKFLOW_MODULES")
    assert workflow_modules() == []


def test_switchyards_tasks_carry_their_own_durability_whatever_the_project_configured():
    """The demo project, like a host, sets no CELERY_TASK_ACKS_LATE: the tasks acknowledge late
    and give a message back when their worker process dies all the same."""
    assert not project_app.conf.task_acks_late and not project_app.conf.task_reject_on_worker_lost
    for task in (advance, run_operation):
        assert task.name in (broker.ADVANCE_TASK, broker.RUNNER_TASK) and task.app is project_app
        assert (task.acks_late, task.reject_on_worker_lost, task.ignore_result) == (True, True, True), task.name


def test_a_switchyard_worker_takes_one_message_at_a_time_and_runs_on_when_the_broker_drops(monkeypatch):
    argv = []
    monkeypatch.setattr(project_app, "worker_main", argv.extend)
    for key in ("worker_cancel_long_running_tasks_on_connection_loss", "CELERY_DB_REUSE_MAX"):
        monkeypatch.setitem(project_app.conf, key, project_app.conf.get(key))
    lifecycle.run_worker("agent probe", queue="probe", hostname="probe@here", concurrency=3, loglevel="INFO")
    assert argv[argv.index("--prefetch-multiplier") + 1] == "1" and argv[argv.index("--queues") + 1] == "probe"
    assert argv[argv.index("--concurrency") + 1] == "3" and "--task-events" in argv
    assert argv[argv.index("--hostname") + 1] == "probe@here" and argv[argv.index("--loglevel") + 1] == "INFO"
    assert project_app.conf.worker_cancel_long_running_tasks_on_connection_loss is False
    assert project_app.conf["CELERY_DB_REUSE_MAX"] >= 2**31  # Celery's Django fix-up keeps the connection


def test_run_flower_without_flower_installed_says_how_to_install_it(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "flower" else real(name, *a))
    with pytest.raises(CommandError, match=r"pip install 'django-switchyard\[flower\]'"):
        call_command("run_flower")


def test_a_route_registered_after_the_api_urls_loaded_is_refused():
    from workflows_app.api import urls  # noqa: F401  (the URLconf is loaded)

    with pytest.raises(ImproperlyConfigured, match="AppConfig.ready"):
        routes.register(r"^late/?$", "agents.api.AgentList", name="late")


def test_standalone_names_the_pages_where_the_project_serves_them():
    assert standalone._path("api:docs") == "/api/v1/docs"
    assert standalone._path("admin:nowhere").startswith(" (not served")
