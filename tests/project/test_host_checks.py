"""What a new project made with ``django-admin startproject`` meets, and is now told in one line.

A small host project of the test's own (``hostproj``: startproject's settings, Switchyard's apps,
a Celery app as Celery's Django guide has it), run as its own ``manage.py`` in processes of its
own, with nothing of this repository's demo project:

* on startproject's SQLite settings, Switchyard's connections get IMMEDIATE transactions, a busy
  timeout and write-ahead logging; what the project set itself is kept, and a value that cannot
  work with several writers is the system check warning ``workflows.W004``;
* a ``SWITCHYARD_WORKFLOW_MODULES`` entry that cannot be imported is ``workflows.E005``, one line,
  for ``check`` and ``migrate``, and ``run_manager`` and ``run_agent`` refuse to start with it;
* a Switchyard environment variable that only the demo project's settings read is
  ``workflows.E006`` (or ``W007``) where the project's settings do not carry it, and nothing
  where they do — the demo project's included.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from workflows_app import checks, conf, environment, registry
from workflows_app.errors import RegistrationError
from workflows_app.management.commands.standalone import Command as Standalone

pytestmark = pytest.mark.processes  # commands and projects of their own

ROOT = Path(__file__).resolve().parents[2]

SETTINGS = '''\
"""startproject's settings, with Switchyard's apps; HOSTPROJ_SETTINGS (JSON) overrides any."""
import json
import os
from pathlib import Path


BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "django-insecure-only-for-this-test"
DEBUG = False
ALLOWED_HOSTS = []
INSTALLED_APPS = [
    "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions",
    "django.contrib.messages", "django.contrib.staticfiles",
    "rest_framework", "rest_framework.authtoken", "django_filters", "drf_spectacular", "workflows_app", "agents",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware", "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware", "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware", "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
ROOT_URLCONF = "hostproj.urls"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates", "DIRS": [], "APP_DIRS": True,
    "OPTIONS": {"context_processors": ["django.template.context_processors.request",
                                       "django.contrib.auth.context_processors.auth",
                                       "django.contrib.messages.context_processors.messages"]},
}]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": BASE_DIR / "db.sqlite3",
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
STATIC_URL = "static/"
CELERY_BROKER_URL = "redis://127.0.0.1:9/0"
SWITCHYARD_WORKFLOW_MODULES = ["hostproj.workflows"]
globals().update(json.loads(os.environ.get("HOSTPROJ_SETTINGS") or "{}"))
'''

FILES = {
    "manage.py": '''\
        import os
        import sys

        if __name__ == "__main__":
            os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostproj.settings")
            from django.core.management import execute_from_command_line
            execute_from_command_line(sys.argv)
    ''',
    "hostproj/__init__.py": '''\
        from .celery import app as celery_app

        __all__ = ("celery_app",)
    ''',
    "hostproj/celery.py": '''\
        import os

        from celery import Celery

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostproj.settings")
        app = Celery("hostproj")
        app.config_from_object("django.conf:settings", namespace="CELERY")
        app.autodiscover_tasks()
    ''',
    "hostproj/urls.py": '''\
        from django.contrib import admin
        from django.urls import include, path

        urlpatterns = [path("admin/", admin.site.urls), path("api/", include("workflows_app.api.urls"))]
    ''',
    "hostproj/workflows.py": '''\
        from workflows_app.sdk import workflow


        @workflow
        def ship(ctx):
            pass
    ''',
    "hostproj/broken.py": '''\
        """A workflow module with a mistake in it."""

        RATE = 1 / 0
    ''',
}

#: Switchyard's variables that only a project's settings read, each with a value.
PROJECT_VARIABLES = {
    "SWITCHYARD_WORKFLOWS": '{"KILL_GRACE_SECONDS": 2}',
    "SWITCHYARD_WORKFLOW_MODULES": "hostproj.other",
    "CELERY_QUEUE_TYPE": "quorum",
    "DATABASE_CONN_MAX_AGE": "600",
    "DATABASE_PREPARE_THRESHOLD": "none",
    "SWITCHYARD_LOG_LEVEL": "DEBUG",
}


@pytest.fixture(scope="module")
def hostproj(tmp_path_factory):
    """A directory holding the host project."""
    base = tmp_path_factory.mktemp("host")
    (base / "hostproj").mkdir()
    (base / "hostproj" / "settings.py").write_text(SETTINGS)
    for name, text in FILES.items():
        (base / name).write_text(textwrap.dedent(text))
    return base


def manage(project, *args, settings=None, **environ):
    """The host project's ``manage.py *args``, in an environment of its own: none of the test
    suite's settings, nor any Switchyard variable it does not give."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DJANGO_", "SWITCHYARD_", "DATABASE_", "CELERY_", "PYTHON"))}
    env.update({"PYTHONPATH": os.pathsep.join([str(project), str(ROOT)]), "SWITCHYARD_VAR_DIR": str(project / "var"),
                "HOSTPROJ_SETTINGS": json.dumps(settings or {}), **environ})
    return subprocess.run([sys.executable, "manage.py", *args], cwd=project, env=env, capture_output=True, text=True,
                          timeout=120)


#: The default connection's options, its transaction mode and its file's journal mode (a JSON
#: line), then the system checks.
SHOW_DATABASE = ("import json; from django.db import connection; from django.core.management import call_command; "
                 "cursor = connection.cursor(); cursor.execute('PRAGMA journal_mode'); "
                 "print(json.dumps([connection.settings_dict['OPTIONS'], connection.transaction_mode, cursor.fetchone()[0]])); "
                 "call_command('check')")


def shown(done):
    return json.loads(next(line for line in done.stdout.splitlines() if line.startswith("[{")))


# --- SQLite ------------------------------------------------------------------------------------

def test_startprojects_sqlite_gets_immediate_transactions_a_busy_timeout_and_wal(hostproj):
    done = manage(hostproj, "shell", "-c", SHOW_DATABASE)
    assert done.returncode == 0, done.stderr
    assert shown(done) == [{"transaction_mode": "IMMEDIATE", "timeout": 30}, "IMMEDIATE", "wal"]
    assert "System check identified no issues" in done.stdout and "workflows." not in done.stderr


def test_what_the_project_set_is_kept_and_what_cannot_work_is_a_warning(hostproj):
    options = {"transaction_mode": "DEFERRED", "timeout": 1, "init_command": "PRAGMA journal_mode=DELETE"}
    database = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(hostproj / "own.sqlite3"), "OPTIONS": options}
    done = manage(hostproj, "shell", "-c", SHOW_DATABASE, settings={"DATABASES": {"default": database}})
    assert done.returncode == 0, done.stderr
    assert shown(done) == [options, "DEFERRED", "delete"]
    warnings = [line for line in done.stderr.splitlines() if "workflows.W004" in line]
    assert len(warnings) == 2, done.stderr
    mode, timeout = sorted(warnings, key=lambda line: "timeout" in line)
    assert "DATABASES['default']['OPTIONS']['transaction_mode'] is 'DEFERRED'" in mode and "set it to 'IMMEDIATE'" in mode
    assert "DATABASES['default']['OPTIONS']['timeout'] is 1" in timeout and "set it to 30 or more" in timeout


def test_a_writing_transaction_mode_and_a_long_enough_timeout_are_fine(hostproj):
    database = {"ENGINE": "django.db.backends.sqlite3", "NAME": str(hostproj / "own.sqlite3"),
                "OPTIONS": {"transaction_mode": "EXCLUSIVE", "timeout": 10}}
    done = manage(hostproj, "check", settings={"DATABASES": {"default": database}})
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


# --- the workflow modules ------------------------------------------------------------------------

def test_a_module_that_cannot_be_imported_is_a_one_line_check_error_for_check_and_migrate(hostproj):
    modules = {"SWITCHYARD_WORKFLOW_MODULES": ["hostproj.wrkflows", "hostproj.broken"]}
    for command in ("check", "migrate"):
        done = manage(hostproj, command, settings=modules)
        assert done.returncode == 1, done.stdout
        assert "Traceback" not in done.stderr, done.stderr
        errors = sorted(line for line in done.stderr.splitlines() if "workflows.E005" in line)
        assert errors == [
            "?: (workflows.E005) SWITCHYARD_WORKFLOW_MODULES names 'hostproj.broken', whose import raised "
            f"ZeroDivisionError: division by zero (at {hostproj / 'hostproj' / 'broken.py'}, line 3)",
            "?: (workflows.E005) SWITCHYARD_WORKFLOW_MODULES names 'hostproj.wrkflows', which cannot be imported: "
            "No module named 'hostproj.wrkflows'",
        ], done.stderr


@pytest.mark.parametrize("argv", [["run_manager"], ["run_agent", "warehouse"], ["run_agent", "warehouse", "--skip-checks"]])
def test_a_manager_or_an_agent_refuses_to_start_without_its_workflows(hostproj, argv):
    done = manage(hostproj, *argv, settings={"SWITCHYARD_WORKFLOW_MODULES": ["hostproj.wrkflows"]})
    assert done.returncode == 1
    assert done.stderr.splitlines() == ["CommandError: SWITCHYARD_WORKFLOW_MODULES names 'hostproj.wrkflows', "
                                        "which cannot be imported: No module named 'hostproj.wrkflows'"], done.stderr


def test_a_setting_that_is_not_a_list_of_names_is_a_check_error():
    with override_settings(SWITCHYARD_WORKFLOW_MODULES="tests.workflows"):
        [error] = checks.check_workflow_modules()
        assert error.id == "workflows.E005"
        assert error.msg == ("SWITCHYARD_WORKFLOW_MODULES must be a list of module names, such as [\"shop.workflows\"], "
                             "not str 'tests.workflows'")
        assert registry.workflow_modules() == []


def test_an_unknown_workflow_names_the_setting_and_what_it_loaded(monkeypatch):
    monkeypatch.delenv("SWITCHYARD_WORKFLOW_MODULES", raising=False)
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=[]):
        with pytest.raises(RegistrationError) as raised:
            registry.get_workflow("fulfil")
        assert str(raised.value) == (
            "no workflow named 'fulfil' is registered (SWITCHYARD_WORKFLOW_MODULES names no module: set it to the "
            "modules that define your workflows and operations, such as [\"shop.workflows\"])")
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=["tests.workflows"]):
        with pytest.raises(RegistrationError, match=r"\(the modules loaded from SWITCHYARD_WORKFLOW_MODULES are "
                                                    r"tests\.workflows\)$"):
            registry.get_workflow("fulfil")
        with pytest.raises(RegistrationError, match="no operation named 'pack' is registered .the modules loaded"):
            registry.get_operation("pack")
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=["tests.workflows", "tests.no_such_workflows"]):
        with pytest.raises(RegistrationError, match=r"\(SWITCHYARD_WORKFLOW_MODULES names 'tests.no_such_workflows', "
                                                    r"which cannot be imported: No module named 'tests.no_such_workflows'\)$"):
            registry.get_workflow("fulfil")


@pytest.mark.django_db
def test_start_execution_of_an_unknown_workflow_says_where_workflows_come_from(monkeypatch):
    monkeypatch.delenv("SWITCHYARD_WORKFLOW_MODULES", raising=False)
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=[]):
        with pytest.raises(CommandError, match=r"^no workflow named 'fulfil' is registered \(SWITCHYARD_WORKFLOW_MODULES "
                                               r"names no module: set it"):
            call_command("start_execution", "fulfil")


# --- environment variables that only a project's settings read ------------------------------------

def test_a_variable_the_projects_settings_do_not_read_is_refused(hostproj):
    done = manage(hostproj, "check", settings={"DATABASES": {"default": {
        "ENGINE": "django.db.backends.postgresql", "NAME": "unused", "HOST": "127.0.0.1", "PORT": "9"}}},
        **PROJECT_VARIABLES)
    assert done.returncode == 1, done.stderr
    found = {name: line for line in done.stderr.splitlines() for name in PROJECT_VARIABLES
             if f"{name}={PROJECT_VARIABLES[name]} is set in the environment" in line}
    assert sorted(found) == sorted(PROJECT_VARIABLES), done.stderr
    for name in ("SWITCHYARD_WORKFLOWS", "SWITCHYARD_WORKFLOW_MODULES", "CELERY_QUEUE_TYPE"):
        assert "(workflows.E006)" in found[name], found[name]
    for name in ("DATABASE_CONN_MAX_AGE", "DATABASE_PREPARE_THRESHOLD", "SWITCHYARD_LOG_LEVEL"):
        assert "(workflows.W007)" in found[name], found[name]
    assert "only Switchyard's own demo project's do): in your project's settings, set those keys in WORKFLOWS" \
        in found["SWITCHYARD_WORKFLOWS"]
    assert "the setting SWITCHYARD_WORKFLOW_MODULES names other modules, and the setting wins" \
        in found["SWITCHYARD_WORKFLOW_MODULES"]
    assert "CELERY_TASK_DEFAULT_QUEUE_TYPE and CELERY_TASK_CREATE_MISSING_QUEUE_TYPE" in found["CELERY_QUEUE_TYPE"]


def test_a_variable_whose_value_the_projects_settings_carry_is_fine(hostproj):
    carried = {
        "WORKFLOWS": {"KILL_GRACE_SECONDS": 2},
        "SWITCHYARD_WORKFLOW_MODULES": ["hostproj.workflows"],
        "CELERY_TASK_DEFAULT_QUEUE_TYPE": "quorum", "CELERY_TASK_CREATE_MISSING_QUEUE_TYPE": "quorum",
        "DATABASES": {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "unused", "HOST": "127.0.0.1",
                                  "PORT": "9", "CONN_MAX_AGE": 600, "OPTIONS": {"prepare_threshold": None}}},
        "LOGGING": {"version": 1, "root": {"level": "DEBUG"}},
    }
    done = manage(hostproj, "check", settings=carried,
                  **{**PROJECT_VARIABLES, "SWITCHYARD_WORKFLOW_MODULES": "hostproj.workflows"})
    assert (done.returncode, done.stderr) == (0, ""), done.stderr


def test_the_demo_project_reads_every_one_of_them():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_SETTINGS_MODULE", "DATABASE_URL"))}
    env.update(PROJECT_VARIABLES, SWITCHYARD_WORKFLOW_MODULES="workflows_app.examples")
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "workflows." not in done.stdout + done.stderr, done.stdout + done.stderr


def test_the_module_variable_alone_is_read_by_the_apps(monkeypatch):
    monkeypatch.setenv("SWITCHYARD_WORKFLOW_MODULES", "tests.workflows")
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=None):
        assert environment.ignored() == [] and registry.workflow_modules() == ["tests.workflows"]
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=["tests.workflows"]):
        assert environment.ignored() == []
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=["tests.canvas_workflows"]):
        [(variable, value)] = environment.ignored()
        assert (variable.name, value) == ("SWITCHYARD_WORKFLOW_MODULES", "tests.workflows")


# --- standalone's Flower, in any project -------------------------------------------------------

def test_standalone_tells_its_web_server_where_flower_is_in_any_project(monkeypatch):
    monkeypatch.delenv(conf.STANDALONE_FLOWER_URL_ENV, raising=False)
    with override_settings(WORKFLOWS={}):
        assert Standalone._linking_to_flower("http://127.0.0.1:5555") == {
            "SWITCHYARD_STANDALONE_FLOWER_URL": "http://127.0.0.1:5555"}
        monkeypatch.setenv(conf.STANDALONE_FLOWER_URL_ENV, "http://127.0.0.1:5555")
        conf.workflows_settings.reload()
        assert conf.workflows_settings.FLOWER_URL == "http://127.0.0.1:5555"
        assert environment.ignored() == []  # no variable of a project's settings involved
    with override_settings(WORKFLOWS={"FLOWER_URL": "http://flower.example"}):  # the project's own wins
        assert conf.workflows_settings.FLOWER_URL == "http://flower.example"
        assert Standalone._linking_to_flower("http://127.0.0.1:5555") == {}
    monkeypatch.delenv(conf.STANDALONE_FLOWER_URL_ENV)
    conf.workflows_settings.reload()
