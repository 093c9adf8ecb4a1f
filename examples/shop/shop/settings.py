"""Settings of the shop, an ordinary Django 5.2 project that runs Switchyard.

Read from the environment: ``DATABASE_URL`` (``postgres://user:password@host:5432/name`` or
``sqlite:////absolute/path.sqlite3``; unset: ``startproject``'s ``db.sqlite3``), ``CELERY_BROKER_URL``
(default: the Redis on localhost), ``SHOP_DATA_DIR`` (where the shop's workflows keep their
files; default ``var/``), ``SWITCHYARD_WORKFLOWS`` (a JSON object over ``WORKFLOWS``) and
``DJANGO_SECRET_KEY`` / ``DJANGO_DEBUG`` / ``DJANGO_ALLOWED_HOSTS``.

What Switchyard asks of a project is marked "Switchyard:"; everything else is the shop's own.
"""

import json
import os
import secrets
import time
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
SHOP_DATA_DIR = Path(os.environ.get("SHOP_DATA_DIR") or BASE_DIR / "var").resolve()



def _local_secret_key() -> str:
    """No key in the code: without DJANGO_SECRET_KEY, one made once in the data directory,
    readable by its owner only, and shared by every process of the shop on this host."""
    path = SHOP_DATA_DIR / "secret_key"
    SHOP_DATA_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
            file.write(secrets.token_urlsafe(50))
    except FileExistsError:  # made before, or by another process starting now
        pass
    for _ in range(50):  # another process may be writing it
        key = path.read_text().strip()
        if key:
            return key
        time.sleep(0.02)
    raise ImproperlyConfigured(f"{path} is empty: delete it, or set DJANGO_SECRET_KEY")


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or _local_secret_key()
DEBUG = os.environ.get("DJANGO_DEBUG", "false").lower() in ("1", "true", "yes", "on")
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1").split(",") if h.strip()]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # Switchyard: its two apps and what its API and admin are built with.
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "workflows_app",
    "agents",
    # Django's Tasks framework on Django 5.2 (Django 6 has it built in).
    "django_tasks",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "shop.urls"
WSGI_APPLICATION = "shop.wsgi.application"

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


# --- Database ----------------------------------------------------------------------------
def database_from_url(url):
    """``DATABASES["default"]`` from a URL: ``sqlite:///relative``, ``sqlite:////absolute``
    (as ``startproject`` has it, no options) or ``postgres://user:password@host:port/name?option=value``
    (a host starting with ``%2F`` is a socket directory; persistent, health-checked connections)."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        name = Path(parts.path[1:] if parts.path.startswith("/") else parts.path)
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": name if name.is_absolute() else BASE_DIR / name}
    if parts.scheme in ("postgres", "postgresql", "pgsql"):
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parts.path.lstrip("/")),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": unquote(parts.hostname or ""),
            "PORT": str(parts.port or ""),
            "OPTIONS": dict(parse_qsl(parts.query)),
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
        }
    raise ImproperlyConfigured(f"DATABASE_URL: unsupported scheme {parts.scheme!r} (sqlite or postgres)")


# Django's startproject default, as it is: a manager, the web server and the commands all write
# this file at once, and Switchyard sets on its connections what that needs (nothing to add here).
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": BASE_DIR / "db.sqlite3",
    }
}
if os.environ.get("DATABASE_URL"):
    DATABASES["default"] = database_from_url(os.environ["DATABASE_URL"])

# An older project's default: Switchyard's apps choose their own primary keys whatever this says.
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "Europe/Paris"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"

# The shop's own API defaults, which Switchyard's endpoints do not take: they keep their own
# authentication (token or session), permissions, limit/offset pagination and JSON errors.
REST_FRAMEWORK = {
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.AllowAny"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 10,
}

# --- Celery: the shop's own app (shop/celery.py) -------------------------------------------
# Only the broker: Switchyard's tasks and workers carry the options its durability needs
# (acknowledged once run, given back when a worker process dies, one message per process at a
# time, operations that run on when the broker connection drops), whatever these settings say.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or "redis://127.0.0.1:6379/0"

# --- Switchyard -----------------------------------------------------------------------------
# The modules that register the shop's workflows and operations: every process imports them.
SWITCHYARD_WORKFLOW_MODULES = ["shop.workflows"]
# Engine settings (every key has a default, see workflows_app.conf.DEFAULTS): the shop's
# manager queue has a name of its own; SWITCHYARD_WORKFLOWS (JSON) overrides any key.
WORKFLOWS = {"MANAGEMENT_QUEUE": "shop-management"}
try:
    WORKFLOWS.update(json.loads(os.environ.get("SWITCHYARD_WORKFLOWS") or "{}"))
except (ValueError, TypeError) as exc:
    raise ImproperlyConfigured(f"SWITCHYARD_WORKFLOWS must be a JSON object: {exc}") from None

# Switchyard: the backend of Django's Tasks framework. Each task enqueued (shop/tasks.py) is a
# durable execution; the framework's "default" queue runs on the managers, another queue name is
# an agent's. OPTIONS: the retries and the timeout of every attempt.
TASKS = {
    "default": {
        "BACKEND": "workflows_app.django_tasks.SwitchyardBackend",
        "QUEUES": ["default"],
        "OPTIONS": {"max_retries": 3, "retry_interval": 2, "timeout": 60},
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "INFO"},
}
