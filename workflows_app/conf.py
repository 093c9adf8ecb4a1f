"""The ``WORKFLOWS`` settings dict, read through one object (like DRF's ``api_settings``).

    from workflows_app.conf import workflows_settings
    workflows_settings.KILL_GRACE_SECONDS

Every key of ``DEFAULTS`` may be overridden in ``settings.WORKFLOWS``; an unknown key is
refused — by the system check ``workflows.E001`` at start-up and by ``ConfigurationError`` on
first read. The object reloads when ``WORKFLOWS`` changes under ``override_settings``.

The demo project's settings read ``WORKFLOWS`` from the environment variable
``SWITCHYARD_WORKFLOWS`` (a JSON object); another project's settings may do the same, and when
the variable is set but the project's ``WORKFLOWS`` does not carry it, the system check
``workflows.E006`` says so (:mod:`workflows_app.environment`). The one key read from the
environment in any project is ``FLOWER_URL``, from ``SWITCHYARD_STANDALONE_FLOWER_URL`` when
``WORKFLOWS`` sets none: ``manage.py standalone`` tells the web server it starts where its Flower is.
"""

import functools
import os
from pathlib import Path

from django.conf import settings
from django.core.signals import setting_changed

from workflows_app.errors import ConfigurationError
from workflows_app.states import FailureMode

DEFAULTS = {
    "MANAGEMENT_QUEUE": "management",
    "FAILURE_MODE": FailureMode.NO_NEW_CALLS.value,
    "MAX_RETRIES": 3,
    "RETRY_INTERVAL": 5,
    "WAIT_AFTER_FAIL": 600,
    "KILL_GRACE_SECONDS": 5,
    "CANCEL_TIMEOUT": 3600,
    "AGENT_HEARTBEAT_SECONDS": 10,
    "AGENT_OFFLINE_AFTER_SECONDS": 60,
    "ABORT_ON_TERMINATE": False,
    "FLOWER_URL": None,
    "SHUTDOWN_PHASE_TIMEOUTS": {"stop_intake": 5, "finish_running": 30, "flush": 30},
    "DATABASE_OUTAGE_TOLERANCE": 120,
    "WORKFLOW_CACHE_SIZE": 100,
    # What gets in: the largest JSON value stored (parameters, payloads, results).
    "MAX_PAYLOAD_BYTES": 2 * 1024 * 1024,
    # Per user, DRF's rate strings: reads (GET) and writes (starts, actions, events).
    "API_THROTTLE_RATES": {"read": "1200/minute", "write": "240/minute"},
    # Days an ended execution is kept before the managers purge it; None: kept for ever.
    "RETENTION_DAYS": None,
    # The bearer token a Prometheus server scrapes GET metrics with; None: only users may.
    "METRICS_TOKEN": None,
    # The key every agent's key is derived from (wire.keys); None: derived from SECRET_KEY.
    "AGENT_MASTER_KEY": None,
    # Seconds: the shortest gap between two slots of a schedule a user who is not a superuser
    # creates or retimes (workflows_app.schedules.min_interval).
    "SCHEDULE_MIN_INTERVAL": 10,
    # Seconds a start's idempotency key answers with the execution it started
    # (workflows_app.flow.idempotency); after that, a start with it starts anew.
    "IDEMPOTENCY_SECONDS": 86400,
    # Seconds a local step may run inside its manager's pass when it sets no timeout of its own
    # (workflows_app.local_steps): then that attempt fails, retryable by its policy.
    "LOCAL_STEP_TIMEOUT": 30,
    # Seconds an attempt's message may run on its agent without asking a manager first
    # (agents.worker.grants): past it, its delivery claims the attempt. A granted attempt that
    # never started is not declared lost, reset or stopped for good before it expired.
    "GRANT_SECONDS": 30,
}

#: Where ``manage.py standalone``'s Flower is, for the web server it starts (see above).
STANDALONE_FLOWER_URL_ENV = "SWITCHYARD_STANDALONE_FLOWER_URL"

_NUMBER_KEYS = {"RETRY_INTERVAL", "WAIT_AFTER_FAIL", "KILL_GRACE_SECONDS", "CANCEL_TIMEOUT",
                "AGENT_HEARTBEAT_SECONDS", "AGENT_OFFLINE_AFTER_SECONDS", "DATABASE_OUTAGE_TOLERANCE",
                "SCHEDULE_MIN_INTERVAL", "LOCAL_STEP_TIMEOUT", "GRANT_SECONDS"}


def unknown_keys(user_settings) -> list[str]:
    """The keys of a ``WORKFLOWS`` dict that are not settings, one sentence each."""
    if not isinstance(user_settings, dict):
        return [f"WORKFLOWS must be a dict, not {type(user_settings).__name__}"]
    return [f"unknown key {key!r} in WORKFLOWS (known: {', '.join(sorted(DEFAULTS))})"
            for key in user_settings if key not in DEFAULTS]


def bad_values(user_settings) -> list[str]:
    """The values of a ``WORKFLOWS`` dict that cannot work, one sentence each."""
    if not isinstance(user_settings, dict):
        return []
    found = []
    for key in _NUMBER_KEYS & user_settings.keys():
        value = user_settings[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            found.append(f"WORKFLOWS[{key!r}] must be a number of seconds >= 0, not {value!r}")
    if "MAX_RETRIES" in user_settings:
        value = user_settings["MAX_RETRIES"]
        if isinstance(value, bool) or not isinstance(value, int) or value < -1:
            found.append(f"WORKFLOWS['MAX_RETRIES'] must be an integer >= -1 (-1: no limit), not {value!r}")
    if "WORKFLOW_CACHE_SIZE" in user_settings:
        value = user_settings["WORKFLOW_CACHE_SIZE"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            found.append(f"WORKFLOWS['WORKFLOW_CACHE_SIZE'] must be an integer >= 0 (0: always replay), not {value!r}")
    if "MAX_PAYLOAD_BYTES" in user_settings:
        value = user_settings["MAX_PAYLOAD_BYTES"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1024:
            found.append(f"WORKFLOWS['MAX_PAYLOAD_BYTES'] must be a whole number of bytes >= 1024, not {value!r}")
    if "IDEMPOTENCY_SECONDS" in user_settings:
        value = user_settings["IDEMPOTENCY_SECONDS"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            found.append(f"WORKFLOWS['IDEMPOTENCY_SECONDS'] must be a whole number of seconds > 0, not {value!r}")
    if "RETENTION_DAYS" in user_settings:
        value = user_settings["RETENTION_DAYS"]
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
            found.append(f"WORKFLOWS['RETENTION_DAYS'] must be None (keep) or a number of days > 0, not {value!r}")
    if "METRICS_TOKEN" in user_settings and not _is_token(user_settings["METRICS_TOKEN"]):
        found.append(f"WORKFLOWS['METRICS_TOKEN'] must be None (no scrape token) or a string of at least "
                     f"{MIN_TOKEN_LENGTH} visible ASCII characters, such as secrets.token_urlsafe(32) makes")
    if "AGENT_MASTER_KEY" in user_settings and not (user_settings["AGENT_MASTER_KEY"] is None or _is_token(
            user_settings["AGENT_MASTER_KEY"], MIN_MASTER_KEY_LENGTH)):
        found.append(f"WORKFLOWS['AGENT_MASTER_KEY'] must be None (derived from SECRET_KEY) or a string of at least "
                     f"{MIN_MASTER_KEY_LENGTH} visible ASCII characters, such as secrets.token_urlsafe(48) makes")
    if "API_THROTTLE_RATES" in user_settings:
        rates = user_settings["API_THROTTLE_RATES"]
        if not isinstance(rates, dict) or set(rates) - set(DEFAULTS["API_THROTTLE_RATES"]) or not all(
                rate is None or _is_rate(rate) for rate in rates.values()):
            found.append("WORKFLOWS['API_THROTTLE_RATES'] must be a dict with keys among ['read', 'write'], each "
                         "None (no limit) or a rate such as '1200/minute'")
    if "FAILURE_MODE" in user_settings and user_settings["FAILURE_MODE"] not in FailureMode.values:
        found.append(f"WORKFLOWS['FAILURE_MODE'] must be one of {FailureMode.values}, not {user_settings['FAILURE_MODE']!r}")
    if "MANAGEMENT_QUEUE" in user_settings and not (isinstance(user_settings["MANAGEMENT_QUEUE"], str) and user_settings["MANAGEMENT_QUEUE"]):
        found.append("WORKFLOWS['MANAGEMENT_QUEUE'] must be a non-empty string")
    if "FLOWER_URL" in user_settings and not (user_settings["FLOWER_URL"] is None or (
            isinstance(user_settings["FLOWER_URL"], str) and user_settings["FLOWER_URL"].startswith(("http://", "https://")))):
        found.append("WORKFLOWS['FLOWER_URL'] must be None or an http(s) URL, such as 'http://127.0.0.1:5555'")
    if "ABORT_ON_TERMINATE" in user_settings and not isinstance(user_settings["ABORT_ON_TERMINATE"], bool):
        found.append("WORKFLOWS['ABORT_ON_TERMINATE'] must be true or false")
    if "SHUTDOWN_PHASE_TIMEOUTS" in user_settings:
        phases = user_settings["SHUTDOWN_PHASE_TIMEOUTS"]
        default_phases = DEFAULTS["SHUTDOWN_PHASE_TIMEOUTS"]
        if not isinstance(phases, dict) or set(phases) - set(default_phases):
            found.append(f"WORKFLOWS['SHUTDOWN_PHASE_TIMEOUTS'] must be a dict with keys among {sorted(default_phases)}")
    return found


#: The shortest scrape token accepted: a short one is guessed.
MIN_TOKEN_LENGTH = 16
#: The shortest master key accepted: every agent's key is derived from it.
MIN_MASTER_KEY_LENGTH = 32


def _is_token(token, min_length=MIN_TOKEN_LENGTH) -> bool:
    """None, or what an ``Authorization: Bearer`` header can carry whole: visible ASCII, no space."""
    return token is None or (isinstance(token, str) and len(token) >= min_length
                             and all("!" <= character <= "~" for character in token))


def _is_rate(rate) -> bool:
    """A DRF throttle rate: ``"<requests>/<second|minute|hour|day>"`` (only the unit's first letter counts)."""
    if not isinstance(rate, str) or rate.count("/") != 1:
        return False
    number, period = rate.split("/")
    return number.isdigit() and int(number) > 0 and period[:1] in ("s", "m", "h", "d")


class WorkflowsSettings:
    """Attribute access to ``WORKFLOWS`` with ``DEFAULTS`` filled in."""

    def __init__(self):
        self._values = None

    def _load(self):
        user = getattr(settings, "WORKFLOWS", None) or {}
        found = unknown_keys(user) + bad_values(user)
        if found:
            raise ConfigurationError("; ".join(found))
        values = {**DEFAULTS, **user}
        if "FLOWER_URL" not in user:
            values["FLOWER_URL"] = os.environ.get(STANDALONE_FLOWER_URL_ENV) or None
        # A partial override of the shutdown phases keeps the other phases' defaults.
        values["SHUTDOWN_PHASE_TIMEOUTS"] = {**DEFAULTS["SHUTDOWN_PHASE_TIMEOUTS"], **user.get("SHUTDOWN_PHASE_TIMEOUTS", {})}
        values["API_THROTTLE_RATES"] = {**DEFAULTS["API_THROTTLE_RATES"], **user.get("API_THROTTLE_RATES", {})}
        return values

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in DEFAULTS:
            raise AttributeError(f"WORKFLOWS has no setting {name!r}")
        if self._values is None:
            self._values = self._load()
        return self._values[name]

    def as_dict(self) -> dict:
        if self._values is None:
            self._values = self._load()
        return dict(self._values)

    def reload(self):
        self._values = None


workflows_settings = WorkflowsSettings()


def _reload(*, setting, **kwargs):
    if setting == "WORKFLOWS":
        workflows_settings.reload()


setting_changed.connect(_reload)


#: The environment variable that moves Switchyard's local files.
VAR_DIR_ENV = "SWITCHYARD_VAR_DIR"


def var_dir() -> Path:
    """The directory of the local files Switchyard keeps on a host — an agent's process-group
    records, the embedded Redis, Flower's history: ``SWITCHYARD_VAR_DIR``, else ``var/`` in the
    project's ``BASE_DIR`` (Django's ``startproject`` convention), else ``var/`` in the current
    directory. Whoever writes there creates what it needs."""
    configured = os.environ.get(VAR_DIR_ENV)
    path = Path(configured) if configured else Path(getattr(settings, "BASE_DIR", None) or Path.cwd()) / "var"
    return _resolved(path if path.is_absolute() else Path.cwd() / path)


@functools.lru_cache(maxsize=16)
def _resolved(path: Path) -> Path:
    """``path`` (absolute) with its symbolic links resolved, once per process: an agent asks
    for its directory on every operation, and resolving reads every part of the path."""
    return path.resolve()
