"""docker/compose.yaml is a valid Compose file that runs the whole stack (SPEC §1, §3): PostgreSQL,
Redis, the web, a manager, two agents and Flower, each with a health check.

Checked with Docker Compose itself — the v2 plugin (``docker compose``) or Debian's
``docker-compose`` (v1); ``scripts/ensure_test_tools.sh`` installs the latter. Without either the
test fails rather than skips, so a machine that lost the tool cannot pass by saying nothing.
"""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "docker" / "compose.yaml"


def compose_command():
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.fail("neither `docker compose` nor `docker-compose` is installed: run scripts/ensure_test_tools.sh")


def compose(*args):
    return subprocess.run([*compose_command(), "-f", str(COMPOSE_FILE), *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)


@pytest.fixture(scope="module")
def services():
    """The services as Compose resolves them (anchors and merges applied)."""
    done = compose("config")
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)["services"]


def test_compose_accepts_the_file():
    done = compose("config", "-q")
    assert done.returncode == 0, done.stderr


def test_the_stack_has_every_process_and_two_agents(services):
    assert {"postgres", "redis", "web", "manager", "agent-1", "agent-2", "flower"} <= set(services)
    assert services["agent-1"]["command"][-2:] == ["run_agent", "agent-1"]
    assert services["agent-2"]["command"][-2:] == ["run_agent", "agent-2"]
    assert "run_manager" in services["manager"]["command"]
    assert "gunicorn switchyard.wsgi" in " ".join(services["web"]["command"])


@pytest.mark.parametrize("name", ["postgres", "redis", "web", "manager", "agent-1", "agent-2", "flower"])
def test_every_service_has_a_health_check(services, name):
    test = services[name].get("healthcheck", {}).get("test")
    assert test and test[0] in {"CMD", "CMD-SHELL"} and not services[name]["healthcheck"].get("disable")


def test_health_checks_ask_each_process_itself(services):
    """HTTP for web and Flower, Celery's ping for the manager and each agent (its own node)."""
    def check(name):
        return " ".join(services[name]["healthcheck"]["test"])

    assert "http://127.0.0.1:8000/admin/login/" in check("web")
    assert "http://127.0.0.1:5555/healthcheck" in check("flower")
    assert "inspect ping" in check("agent-1") and "-d agent-1@" in check("agent-1")
    assert "inspect ping" in check("agent-2") and "-d agent-2@" in check("agent-2")
    assert "pattern='manager-*@'" in check("manager") and ".ping()" in check("manager")


def test_the_admin_links_to_flower_and_the_workers_wait_for_the_migrated_database(services):
    assert '"FLOWER_URL": "http://localhost:5555"' in services["web"]["environment"]["SWITCHYARD_WORKFLOWS"]
    assert "migrate" in " ".join(services["web"]["command"])
    for name in ("manager", "agent-1", "agent-2"):
        assert services[name]["depends_on"]["web"]["condition"] == "service_healthy"
