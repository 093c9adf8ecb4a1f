"""GET /api/v1/metrics with real processes: two managers and an agent run executions, two web
servers (``runserver``, each a process of its own) and the test process answer scrapes, and every
one of them counts the same, since each reads the database rather than a memory of its own. And
the reports waiting are counted in the broker itself; and the scrape's benchmark runs."""

import subprocess
import sys
import urllib.error
import urllib.request
import uuid

import pytest
from celery import current_app
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from tests.integration.harness import ROOT, ensure_broker, free_port
from workflows_app import broker, services, wire

pytestmark = pytest.mark.integration

TOKEN = "integration-scrape-token-0123456789"
#: What Prometheus 3 sends.
PROMETHEUS_ACCEPT = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
#: What changes from one moment to the next whatever the executions do: heartbeats are reports too.
MOMENTARY = {"switchyard_reports_waiting"}


def parse(text) -> dict:
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def scrape_http(port, token=TOKEN) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/v1/metrics",
                                     headers={"Authorization": f"Bearer {token}", "Accept": PROMETHEUS_ACCEPT})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        return parse(response.read().decode())


def scrape_here(workflows) -> dict:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    with override_settings(WORKFLOWS=workflows):
        response = client.get("/api/v1/metrics")
    assert response.status_code == 200, response.content[:300]
    return parse(response.content.decode())


def lasting(samples) -> dict:
    """What every process must answer alike: not the momentary, nor the zeros of the executions of
    workflows registered in one process only (the test process imports every test's)."""
    return {key: value for key, value in samples.items()
            if key[0] not in MOMENTARY and not (key[0] == "switchyard_executions" and value == 0)}


def value(samples, name, **labels):
    return samples[(name, tuple(sorted((k, str(v)) for k, v in labels.items())))]


def answers(port):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/metrics", timeout=2)
    except urllib.error.HTTPError:
        return True  # 401: it answers
    except OSError:
        return False
    return True


def test_two_web_processes_and_the_test_process_count_what_two_managers_ran_alike(stack, tmp_path):
    stack.configure(METRICS_TOKEN=TOKEN)
    agent = stack.agent_name("metrics")
    ports = [free_port(), free_port()]
    stack.start_manager(name="manager-1")
    stack.start_manager(name="manager-2")
    stack.start_agent(agent)
    for i, port in enumerate(ports):
        stack.manage(f"web-{i}", "runserver", "--noreload", f"127.0.0.1:{port}")
    stack.wait_for_agent(agent)

    started = [services.start("it_fan_out", {"n": 3, "agents": [agent]}) for _ in range(2)]
    started.append(services.start("it_single", {"agent": agent, "tag": "metrics-slow", "seconds": 0.6}))
    started.append(services.start("it_resumable", {"agent": agent, "path": str(tmp_path / "never-made")}))
    ended = [stack.wait_for_terminal(execution.pk).status for execution in started]
    assert ended == ["completed", "completed", "completed", "failed"]
    for port in ports:
        stack.wait_for(lambda: answers(port), timeout=60, what=f"the web server on port {port}")

    scrapes = {f"web-{i}": scrape_http(port) for i, port in enumerate(ports)}
    scrapes["test process"] = scrape_here(stack.workflows)

    web = lasting(scrapes["web-0"])
    for where, samples in scrapes.items():
        assert lasting(samples) == web, where
        assert value(samples, "switchyard_reports_waiting") >= 0, where
    assert value(web, "switchyard_executions", workflow="it_fan_out", status="completed") == 2
    assert value(web, "switchyard_executions", workflow="it_single", status="completed") == 1
    assert value(web, "switchyard_executions", workflow="it_resumable", status="failed") == 1
    assert {key[1][0][1]: count for key, count in web.items() if key[0] == "switchyard_operations" and count} == {
        "succeeded": 2 * 4 + 1 + 1, "failed": 1}
    assert value(web, "switchyard_execution_duration_seconds_count", workflow="it_fan_out") == 2
    # it_step: it_single's 0.6 s sleep and it_resumable's first step; it_add: the fan-outs' 8.
    assert value(web, "switchyard_operation_duration_seconds_count", operation="it_step") == 2
    assert value(web, "switchyard_operation_duration_seconds_sum", operation="it_step") >= 0.6
    assert value(web, "switchyard_operation_duration_seconds_bucket", operation="it_step", le="0.5") <= 1
    assert value(web, "switchyard_operation_duration_seconds_count", operation="it_add") == 8
    assert value(web, "switchyard_operation_duration_seconds_count", operation="it_needs_file") == 1
    assert value(web, "switchyard_operation_queue_seconds_count", agent=agent) == 11
    assert value(web, "switchyard_agents_online") == 1

    with pytest.raises(urllib.error.HTTPError) as refused:
        scrape_http(ports[1], token="not-the-token-of-this-server")
    assert refused.value.code == 401 and refused.value.headers["Content-Type"] == "application/json"


def test_the_reports_waiting_are_those_in_the_brokers_queue(db):
    ensure_broker()
    workflows = {"MANAGEMENT_QUEUE": f"mgmt-metrics-{uuid.uuid4().hex[:8]}", "METRICS_TOKEN": TOKEN}
    with override_settings(WORKFLOWS=workflows):
        broker.declare_reports_queue()
        try:
            assert value(scrape_here(workflows), "switchyard_reports_waiting") == 0, "an empty queue is 0, not unknown"
            with current_app.connection_for_write() as connection:
                producer = connection.Producer()
                for i in range(3):
                    producer.publish({"kind": "heartbeat", "n": i}, serializer="json", **broker.reports_route())
            assert value(scrape_here(workflows), "switchyard_reports_waiting") == 3
            assert broker.purge(wire.reports_queue()) == 3
            assert value(scrape_here(workflows), "switchyard_reports_waiting") == 0
        finally:
            with current_app.connection_for_write() as connection:
                broker.reports_queue()(connection.default_channel).delete()


def test_the_scrape_benchmark_runs_and_reports_its_queries():
    """A tiny run of ``python -m bench.metrics``, so that it cannot rot; it measures nothing here."""
    done = subprocess.run([sys.executable, "-m", "bench.metrics", "--sizes", "20,50", "--rounds", "1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 50 executions, 150 operations |")]
    assert rows and rows[-1].split("|")[4].strip() == "6", done.stdout
