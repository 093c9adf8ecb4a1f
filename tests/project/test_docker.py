"""docker/compose.yaml is a valid Compose file that runs the whole stack: PostgreSQL,
Redis, the web, a manager, two agents and Flower, each with a health check; with safe defaults:
its ports on 127.0.0.1 only, and no start without a secret key and Flower's login.

Checked with Docker Compose itself — the v2 plugin (``docker compose``) or Debian's
``docker-compose`` (v1); ``scripts/ensure_test_tools.sh`` installs the latter. Without either the
test fails rather than skips, so a machine that lost the tool cannot pass by saying nothing.
"""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.processes  # docker compose


ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker" / "compose.yaml"
#: What compose needs from the environment, or it refuses to start.
REQUIRED_ENV = {"DJANGO_SECRET_KEY": "a-test-secret-key-0123456789", "FLOWER_BASIC_AUTH": "watcher:a-test-password"}


def compose_command():
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.fail("neither `docker compose` nor `docker-compose` is installed: run scripts/ensure_test_tools.sh")


def compose(*args, env=REQUIRED_ENV):
    """Compose run on the file, with ``env`` (by default what it requires) and nothing of the
    caller's own variables of that name."""
    base = {k: v for k, v in os.environ.items() if k not in REQUIRED_ENV}
    return subprocess.run([*compose_command(), "-f", str(COMPOSE_FILE), *args], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env={**base, **env})


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
    assert services["manager"]["depends_on"]["web"]["condition"] == "service_healthy"
    for name in ("agent-1", "agent-2"):  # the manager declares the queue of their reports
        assert services[name]["depends_on"]["manager"]["condition"] == "service_healthy"


@pytest.mark.parametrize("name", ["agent-1", "agent-2"])
def test_agents_get_the_broker_and_no_database(services, name):
    environment = services[name]["environment"]
    assert environment["CELERY_BROKER_URL"] == services["manager"]["environment"]["CELERY_BROKER_URL"]
    assert "DATABASE_URL" not in environment and "DJANGO_SECRET_KEY" not in environment


@pytest.mark.parametrize("name", sorted(REQUIRED_ENV))
def test_compose_refuses_to_start_without_a_secret_key_or_flowers_login(name):
    """No public default: a stack started without them would have a secret key anyone can
    read in this file, or a Flower open to anyone."""
    done = compose("config", "-q", env={k: v for k, v in REQUIRED_ENV.items() if k != name})
    assert done.returncode != 0 and name in done.stderr, done.stderr


def test_the_secret_key_and_flowers_login_come_from_the_environment(services):
    for name in ("web", "manager", "flower"):
        assert services[name]["environment"]["DJANGO_SECRET_KEY"] == REQUIRED_ENV["DJANGO_SECRET_KEY"]
    assert services["flower"]["environment"]["FLOWER_BASIC_AUTH"] == REQUIRED_ENV["FLOWER_BASIC_AUTH"]
    assert services["flower"]["environment"]["CELERY_BROKER_URL"] == services["web"]["environment"]["CELERY_BROKER_URL"]
    assert "FLOWER_BASIC_AUTH" not in services["web"]["environment"]


def published_ports(service):
    """(host address, host port) of each published port, from either form Compose prints:
    v2's long one (a mapping) or v1's short one ("127.0.0.1:8000:8000")."""
    found = []
    for port in service.get("ports", []):
        if isinstance(port, dict):
            found.append((port.get("host_ip", ""), str(port.get("published", ""))))
        else:
            address, _, published = str(port).split("/")[0].rpartition(":")[0].rpartition(":")
            found.append((address, published))
    return found


def test_ports_are_published_on_127_0_0_1_only(services):
    """The web and Flower are reachable from this machine only: elsewhere through a proxy."""
    published = {name: published_ports(service) for name, service in services.items() if service.get("ports")}
    assert published == {"web": [("127.0.0.1", "8000")], "flower": [("127.0.0.1", "5555")]}
