"""The WORKFLOWS settings object: its defaults, overrides, refusal of unknown keys."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core import checks
from django.test import override_settings

from workflows_app.conf import DEFAULTS, workflows_settings
from workflows_app.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]

# Django 6.1's system checks (checks.run_checks()) check the models against the databases too:
# a JSONField asks the database whether it supports JSON.
pytestmark = pytest.mark.django_db

SPEC_DEFAULTS = {
    "MANAGEMENT_QUEUE": "management", "FAILURE_MODE": "no_new_calls", "MAX_RETRIES": 3, "SCHEDULE_MIN_INTERVAL": 10,
    "RETRY_INTERVAL": 5, "WAIT_AFTER_FAIL": 600, "KILL_GRACE_SECONDS": 5, "CANCEL_TIMEOUT": 3600,
    "AGENT_HEARTBEAT_SECONDS": 10, "AGENT_OFFLINE_AFTER_SECONDS": 60, "ABORT_ON_TERMINATE": False,
    "FLOWER_URL": None, "SHUTDOWN_PHASE_TIMEOUTS": {"stop_intake": 5, "finish_running": 30, "flush": 30},
    # Issue 18's key: how long a process rides out a database outage.
    "DATABASE_OUTAGE_TOLERANCE": 120,
    # Issue 19's: how many live runs of workflow functions a dispatcher process keeps.
    "WORKFLOW_CACHE_SIZE": 100,
    # What gets in.
    "MAX_PAYLOAD_BYTES": 2 * 1024 * 1024, "API_THROTTLE_RATES": {"read": "1200/minute", "write": "240/minute"},
    "RETENTION_DAYS": None,
    # Issue 37's: the bearer token that scrapes GET /api/v1/metrics.
    "METRICS_TOKEN": None,
    "AGENT_MASTER_KEY": None,
    # How long a start's idempotency key answers with the execution it started.
    "IDEMPOTENCY_SECONDS": 86400,
    "LOCAL_STEP_TIMEOUT": 30,
    "GRANT_SECONDS": 30,
}


def test_defaults_are_the_expected_ones():
    assert DEFAULTS == SPEC_DEFAULTS
    with override_settings(WORKFLOWS={}):
        assert workflows_settings.as_dict() == SPEC_DEFAULTS


def test_an_override_is_read_and_reloaded_under_override_settings():
    with override_settings(WORKFLOWS={"KILL_GRACE_SECONDS": 2}):
        assert workflows_settings.KILL_GRACE_SECONDS == 2
        assert workflows_settings.MAX_RETRIES == 3
        with override_settings(WORKFLOWS={"KILL_GRACE_SECONDS": 7}):
            assert workflows_settings.KILL_GRACE_SECONDS == 7
        assert workflows_settings.KILL_GRACE_SECONDS == 2


def test_a_partial_shutdown_override_keeps_the_other_phases():
    with override_settings(WORKFLOWS={"SHUTDOWN_PHASE_TIMEOUTS": {"flush": 1}}):
        assert workflows_settings.SHUTDOWN_PHASE_TIMEOUTS == {"stop_intake": 5, "finish_running": 30, "flush": 1}


def test_an_unknown_key_is_refused_by_the_object_and_by_a_system_check():
    with override_settings(WORKFLOWS={"KILL_GRACE": 2}):
        with pytest.raises(ConfigurationError, match="unknown key 'KILL_GRACE'"):
            workflows_settings.KILL_GRACE_SECONDS
        errors = checks.run_checks()
        assert [e.id for e in errors] == ["workflows.E001"]
        assert "KILL_GRACE" in errors[0].msg


@pytest.mark.parametrize("value", [-1, 1.5, True, "100"])
def test_a_workflow_cache_size_that_is_not_a_count_is_a_system_check_error(value):
    with override_settings(WORKFLOWS={"WORKFLOW_CACHE_SIZE": value}):
        errors = checks.run_checks()
        assert [e.id for e in errors] == ["workflows.E002"]
        assert "WORKFLOW_CACHE_SIZE" in errors[0].msg


def test_a_value_that_cannot_work_is_a_system_check_error():
    with override_settings(WORKFLOWS={"FAILURE_MODE": "whenever", "KILL_GRACE_SECONDS": "5"}):
        assert sorted(e.id for e in checks.run_checks()) == ["workflows.E002", "workflows.E002"]
        with pytest.raises(ConfigurationError):
            workflows_settings.FAILURE_MODE


@pytest.mark.parametrize("key, value", [
    ("MAX_PAYLOAD_BYTES", 10), ("MAX_PAYLOAD_BYTES", "2MB"), ("MAX_PAYLOAD_BYTES", True),
    ("RETENTION_DAYS", 0), ("RETENTION_DAYS", "30"),
    ("API_THROTTLE_RATES", {"reads": "10/minute"}), ("API_THROTTLE_RATES", {"read": "fast"}),
    ("API_THROTTLE_RATES", {"write": "0/second"}), ("API_THROTTLE_RATES", "100/minute"),
])
def test_limits_that_cannot_work_are_system_check_errors(key, value):
    with override_settings(WORKFLOWS={key: value}):
        errors = checks.run_checks()
        assert [e.id for e in errors] == ["workflows.E002"] and key in errors[0].msg


def test_a_partial_throttle_override_keeps_the_other_rate_and_none_means_no_limit():
    with override_settings(WORKFLOWS={"API_THROTTLE_RATES": {"write": None}, "RETENTION_DAYS": 30}):
        assert checks.run_checks() == []
        assert workflows_settings.API_THROTTLE_RATES == {"read": "1200/minute", "write": None}


def test_flower_url_must_be_an_http_url():
    with override_settings(WORKFLOWS={"FLOWER_URL": "flower:5555"}):
        assert [e.id for e in checks.run_checks()] == ["workflows.E002"]
    with override_settings(WORKFLOWS={"FLOWER_URL": "http://127.0.0.1:5555"}):
        assert checks.run_checks() == []
        assert workflows_settings.FLOWER_URL == "http://127.0.0.1:5555"


def test_an_unknown_attribute_is_an_error():
    with pytest.raises(AttributeError):
        workflows_settings.NO_SUCH_SETTING


def run_manage(*args, **env):
    full_env = {**os.environ, **env}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=60)


def test_the_environment_overrides_keys():
    done = run_manage("shell", "-c", "from workflows_app.conf import workflows_settings as w; print(w.KILL_GRACE_SECONDS, w.MAX_RETRIES)",
                      SWITCHYARD_WORKFLOWS='{"KILL_GRACE_SECONDS": 2}')
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1].split() == ["2", "3"]


def test_bad_environment_json_is_a_one_line_error():
    done = run_manage("check", SWITCHYARD_WORKFLOWS="{not json")
    assert done.returncode != 0
    assert "SWITCHYARD_WORKFLOWS is not valid JSON" in done.stderr


def test_an_unknown_key_in_the_environment_stops_manage_py():
    done = run_manage("check", SWITCHYARD_WORKFLOWS='{"NOPE": 1}')
    assert done.returncode != 0
    assert "workflows.E001" in done.stderr


def demo_settings(**environ):
    """What the demo project's settings say under ``environ`` (a separate process: they are
    read once, at import)."""
    env = {**os.environ, **environ, "DJANGO_SETTINGS_MODULE": "switchyard.settings"}
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup(); from django.conf import settings as s; "
                               "print(s.CELERY_TASK_CREATE_MISSING_QUEUE_TYPE, s.CELERY_TASK_DEFAULT_QUEUE_TYPE, "
                               "s.DATABASES['default'].get('OPTIONS', {}).get('connect_timeout'))"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("value, expected", [("", "classic classic"), ("quorum", "quorum quorum"), ("classic", "classic classic")])
def test_the_queue_type_comes_from_the_environment(value, expected):
    done = demo_settings(CELERY_QUEUE_TYPE=value)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:2] == expected.split()


def test_a_bad_queue_type_is_refused():
    done = demo_settings(CELERY_QUEUE_TYPE="mirrored")
    assert done.returncode != 0
    assert "CELERY_QUEUE_TYPE must be classic or quorum, not 'mirrored'" in done.stderr


def test_postgresql_connections_give_up_connecting_after_five_seconds():
    done = demo_settings(DATABASE_URL="postgres://postgres@127.0.0.1:5432/unused")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[2] == "5"
