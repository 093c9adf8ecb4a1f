"""The demo project's OpenTelemetry SDK (``switchyard/telemetry.py``), set up from ``OTEL_*``:
nothing unless ``OTEL_TRACES_EXPORTER`` names an exporter; ``console`` prints one line of JSON
per span; the execution's span gets its reserved id; an exporter that is not installed stops
the process with a one-line error."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk.trace")

from django.core.exceptions import ImproperlyConfigured  # noqa: E402

from switchyard import telemetry  # noqa: E402
from workflows_app.tracing import ids  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value", ["", "none", " , "])
def test_no_exporter_no_sdk(value):
    assert telemetry.configure({"OTEL_TRACES_EXPORTER": value}, set_global=False) is None
    assert telemetry.configure({}, set_global=False) is None


def test_console_prints_each_span_as_one_line_of_json_with_the_reserved_ids():
    out = io.StringIO()
    provider = telemetry.configure({"OTEL_TRACES_EXPORTER": "console"}, out=out, set_global=False)
    try:
        with ids.reserving(0xaaaa, 0xbbbb):
            provider.get_tracer("test").start_span("workflow install").end()
        provider.get_tracer("test").start_span("other").end()
    finally:
        provider.shutdown()
    lines = out.getvalue().splitlines()
    spans = [json.loads(line) for line in lines]
    assert [span["name"] for span in spans] == ["workflow install", "other"]
    assert (spans[0]["context"]["trace_id"], spans[0]["context"]["span_id"]) == (f"0x{0xaaaa:032x}", f"0x{0xbbbb:016x}")
    assert spans[0]["resource"]["attributes"]["service.name"] == "switchyard"


def test_the_service_name_is_the_environments_when_it_gives_one(monkeypatch):
    monkeypatch.setenv("OTEL_SERVICE_NAME", "billing-manager")
    provider = telemetry.configure({"OTEL_TRACES_EXPORTER": "console"}, out=io.StringIO(), set_global=False)
    try:
        assert provider.resource.attributes["service.name"] == "billing-manager"
    finally:
        provider.shutdown()


def test_an_exporter_that_is_not_installed_is_refused_with_what_to_install():
    with pytest.raises(ImproperlyConfigured, match="names 'zipkin_json', which no installed package provides"):
        telemetry.configure({"OTEL_TRACES_EXPORTER": "console,zipkin_json"}, set_global=False)


@pytest.mark.parametrize("protocol, package", [
    (None, "opentelemetry-exporter-otlp-proto-grpc"), ("grpc", "opentelemetry-exporter-otlp-proto-grpc"),
    ("http/protobuf", "opentelemetry-exporter-otlp-proto-http")])
def test_otlp_is_the_exporter_of_the_protocol_the_environment_names(protocol, package):
    environ = {"OTEL_TRACES_EXPORTER": "otlp", **({"OTEL_EXPORTER_OTLP_PROTOCOL": protocol} if protocol else {})}
    with pytest.raises(ImproperlyConfigured, match=f"names 'otlp', which no installed package provides "
                                                   f"\\(pip install {package}\\)"):
        telemetry.configure(environ, set_global=False)


def test_an_otlp_protocol_that_is_not_one_is_refused():
    environ = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json",
               "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    with pytest.raises(ImproperlyConfigured, match="the OTLP protocol 'http/json' is not one of"):
        telemetry.configure(environ, set_global=False)


@pytest.mark.processes
def test_a_process_asked_for_a_missing_exporter_stops_with_one_line():
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "otlp_nowhere", "DJANGO_SETTINGS_MODULE": "switchyard.settings"}
    done = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [
        "switchyard: OTEL_TRACES_EXPORTER names 'otlp_nowhere', which no installed package provides"]
