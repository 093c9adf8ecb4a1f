"""Switchyard's API in a host project whose settings contradict it (issue 17).

The host (``tests.api.host_settings``, ``tests.api.host_urls``) configures DRF for its own API
(no authentication, ``AllowAny``, page-number pagination of 2, the browsable API, DRF's
exception handler, throttles of one request a day, versioning, DRF's own schema class, ...),
drf-spectacular for its own schema, another time zone, and includes Switchyard's API under
``/ops/v2/``. Switchyard's endpoints must answer exactly as in the demo project.

Every test runs twice: here, with the host's settings applied by ``override_settings`` (what
DRF and drf-spectacular read while they serve a request), and in a process of its own whose
settings module is the host's (``test_..._from_the_start``), where DRF and drf-spectacular also
find them when they are imported (the class attributes of their views, drf-spectacular's
settings, which ``override_settings`` does not reload).
"""

import datetime
import json
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone
from drf_spectacular import plumbing
from drf_spectacular.generators import SchemaGenerator as HostSchemaGenerator
from drf_spectacular.settings import spectacular_settings
from drf_spectacular.views import SpectacularAPIView
from rest_framework.authtoken.models import Token
from rest_framework.permissions import AllowAny
from rest_framework.renderers import BrowsableAPIRenderer
from rest_framework.settings import api_settings as host_api_settings
from rest_framework.test import APIClient
from rest_framework.utils.encoders import JSONEncoder
from rest_framework.views import APIView

from agents.models import Agent
from tests.api.conftest import assert_error
from tests.api.host_settings import HOSTILE_REST_FRAMEWORK, HOSTILE_SPECTACULAR_SETTINGS
from tests.api.host_urls import PREFIX
from workflows_app.api import schema
from workflows_app.api.schema import SchemaGenerator
from workflows_app.models import Event
from workflows_app.states import EventType
from tests import UNKNOWN_ID


ROOT = Path(__file__).resolve().parents[2]
HOST_SETTINGS = "tests.api.host_settings"
OPERATIONS = {
    ("get", "workflows"), ("post", "workflows/{id}"), ("post", "executions"), ("get", "executions"), ("get", "executions/{id}"),
    ("post", "executions/{id}"), ("post", "executions/bulk"), ("get", "executions/{id}/operations"),
    ("get", "executions/{id}/graph"),
    ("post", "executions/{id}/events"), ("get", "events"), ("get", "agents"),
    ("get", "schedules"), ("post", "schedules"), ("get", "schedules/{id}"), ("patch", "schedules/{id}"),
    ("delete", "schedules/{id}"), ("post", "schedules/{id}"), ("get", "metrics"),
}
ENUMS = {"ExecutionStatusEnum", "OperationStateEnum", "FailureModeEnum", "EventTypeEnum", "AgentStatusEnum"}


@contextmanager
def spectacular_user_settings(user_settings):
    """drf-spectacular reads SPECTACULAR_SETTINGS once, when it is imported (``override_settings``
    does not reach it), and caches the enum names it loads: both are swapped here."""
    missing = object()
    saved = spectacular_settings.__dict__.get("_user_settings", missing)

    def load(value):
        for attr in list(spectacular_settings._cached_attrs):
            delattr(spectacular_settings, attr)
        spectacular_settings._cached_attrs.clear()
        if value is missing:
            spectacular_settings.__dict__.pop("_user_settings", None)
        else:
            spectacular_settings._user_settings = value
        schema._clear_caches()  # the enum names' cache, under its name in any drf-spectacular

    load(user_settings)
    try:
        yield
    finally:
        load(saved)


@pytest.fixture(autouse=True)
def host(db):
    with override_settings(REST_FRAMEWORK=HOSTILE_REST_FRAMEWORK, SPECTACULAR_SETTINGS=HOSTILE_SPECTACULAR_SETTINGS,
                           ROOT_URLCONF="tests.api.host_urls", TIME_ZONE="Europe/Paris"), \
            spectacular_user_settings(HOSTILE_SPECTACULAR_SETTINGS):
        yield


@pytest.fixture
def client(user):
    """Authenticated the way a script is: a DRF token."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=user).key}")
    return client


def utc(moment):
    return moment.astimezone(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def test_the_host_settings_are_in_force():
    """Else the checks below prove nothing: DRF, drf-spectacular and the host's own endpoint
    see the host's settings."""
    assert host_api_settings.PAGE_SIZE == 2
    assert host_api_settings.EXCEPTION_HANDLER.__module__ == "rest_framework.views"
    assert spectacular_settings.TITLE == "Host API"
    assert str(timezone.get_current_timezone()) == "Europe/Paris"
    body = APIClient().get("/host/thing", HTTP_ACCEPT="application/json").json()
    assert "detail" in body and "error_code" not in body  # DRF's handler, not Switchyard's
    if django_settings.SETTINGS_MODULE == HOST_SETTINGS:  # and from the start: DRF's class attributes
        assert APIView.renderer_classes[0] is BrowsableAPIRenderer and APIView.permission_classes == [AllowAny]
        assert SpectacularAPIView.permission_classes == [AllowAny]


def test_every_view_of_the_api_carries_its_own_configuration():
    """Every route of ``workflows_app.api.urls`` (the agents app's too) is a SwitchyardView, whose
    schema class is drf-spectacular's whatever the host's DEFAULT_SCHEMA_CLASS."""
    from drf_spectacular.openapi import AutoSchema

    from workflows_app.api import urls
    from workflows_app.api.base import SwitchyardView
    from workflows_app.api.throttling import ReadRateThrottle, WriteRateThrottle

    views = {pattern.name: pattern.callback.cls for pattern in urls.urlpatterns}
    assert {"agents", "schema", "docs", "not-found"} <= set(views)
    for name, view in views.items():
        assert issubclass(view, SwitchyardView) and isinstance(view.schema, AutoSchema), name
        # Switchyard's throttles (rates from WORKFLOWS), not the host's.
        assert view.throttle_classes == [ReadRateThrottle, WriteRateThrottle] and view.versioning_class is None, name


@pytest.mark.parametrize("method,path", [
    ("get", "workflows"), ("get", "executions"), ("post", "executions"), (
        "get", f"executions/{UNKNOWN_ID}"), ("get", "events"), ("get", "agents"), ("get", "schema"),
    ("get", "nowhere"), ("options", "executions"),
])
def test_an_anonymous_request_is_refused_401(method, path):
    response = getattr(APIClient(), method)(f"{PREFIX}/{path}")
    assert_error(response, 401, "not_authenticated")
    assert response["WWW-Authenticate"] == "Token"


def test_a_token_authenticates_and_every_list_is_limit_offset(client, make_execution):
    for _ in range(3):
        make_execution()
    body = client.get(f"{PREFIX}/executions").json()
    assert set(body) == {"count", "next", "previous", "results"}
    assert body["count"] == 3 and len(body["results"]) == 3 and body["next"] is None
    page = client.get(f"{PREFIX}/executions", {"limit": 2}).json()
    assert len(page["results"]) == 2 and page["next"] == f"http://testserver{PREFIX}/executions?limit=2&offset=2"
    for _ in range(3):  # no throttle of the host's (one request a day), no version asked
        assert client.get(f"{PREFIX}/workflows").status_code == 200


def test_an_answer_is_the_same_json_as_in_the_demo_project(client, make_execution):
    execution = make_execution()
    event = Event.objects.create(execution=execution, type=EventType.WORKFLOW_STARTED, message="démarré")
    response = client.get(f"{PREFIX}/executions/{execution.pk}")  # the host's FORMAT_SUFFIX_KWARG is "id"
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response.json()["id"] == str(execution.pk) and response.json()["created_at"] == utc(execution.created_at)
    events = client.get(f"{PREFIX}/events", {"execution_id": execution.pk})
    [shown] = events.json()["results"]
    assert shown["id"] == event.id and shown["timestamp"] == utc(event.timestamp)  # a number; UTC, ISO 8601
    assert events.content == json.dumps(events.json(), ensure_ascii=False, separators=(",", ":")).encode()
    assert client.get(f"{PREFIX}/workflows", {"fmt": "api"})["Content-Type"] == "application/json"


def test_a_start_is_answered_with_a_location_under_the_prefix(client):
    response = client.post(f"{PREFIX}/executions", {"workflow_id": "demo"}, format="json")
    assert response.status_code == 201, response.content
    assert response["Location"] == f"http://testserver{PREFIX}/executions/{response.json()['id']}"


def test_every_error_is_switchyards(client):
    url = f"{PREFIX}/executions"
    assert_error(client.post(url, {"workflow_id": 1}, format="json"), 400, "invalid_parameters")
    body = assert_error(client.post(url, [1], format="json"), 400, "invalid_parameters")
    assert not body["message"].startswith("everything")  # the host's NON_FIELD_ERRORS_KEY
    assert_error(client.post(url, "{not json", content_type="application/json"), 400, "parse_error")
    assert_error(client.post(url, "workflow_id=demo", content_type="application/x-www-form-urlencoded"),
                 415, "unsupported_media_type")
    assert_error(client.get(url, {"status": "bogus"}), 400, "invalid_parameters")
    assert_error(client.get(url, {"limit": "x"}), 400, "invalid_parameters")
    assert_error(client.get(f"{url}/not-a-uuid"), 404, "not_found")
    assert_error(client.get(url, {"format": "api"}), 406, "not_acceptable")  # no browsable API
    assert_error(client.get(url, HTTP_ACCEPT="text/html"), 406, "not_acceptable")
    assert_error(client.delete(f"{PREFIX}/workflows"), 405, "method_not_allowed")
    assert client.options(f"{PREFIX}/workflows").json()["name"] == "Workflow List"  # the host has no metadata class


@pytest.mark.parametrize("path", ["nowhere", "nowhere/at/all/", "executions/x/y/z"])
def test_an_unknown_path_under_the_prefix_is_a_json_404(client, path):
    body = assert_error(client.get(f"{PREFIX}/{path}"), 404, "not_found")
    assert body["message"] == f"no endpoint {PREFIX}/{path}"


def test_the_agents_endpoint_is_served_under_the_prefix(client):
    heartbeat = timezone.now()
    Agent.objects.create(name="cpu", hostname="h1", last_heartbeat=heartbeat)
    assert reverse("api:agents") == f"{PREFIX}/agents"
    for path in ("agents", "agents/"):
        assert client.get(f"{PREFIX}/{path}").json() == {"count": 1, "next": None, "previous": None, "results": [
            {"name": "cpu", "status": "online", "last_heartbeat": utc(heartbeat), "hostname": "h1", "running": 0}]}


def test_the_schema_is_the_demo_projects_under_the_hosts_prefix(client):
    response = client.get(f"{PREFIX}/schema", {"format": "json"})
    assert response.status_code == 200, response.content
    assert response["Content-Disposition"] == 'inline; filename="Switchyard API.json"'
    served = response.json()
    assert {(method, path) for path, item in served["paths"].items() for method in item} == {
        (method, f"{PREFIX}/{path}") for method, path in OPERATIONS}  # not the host's own endpoint
    assert ENUMS <= set(served["components"]["schemas"])
    assert served["info"]["title"] == "Switchyard API" and "servers" not in served
    assert {op["tags"][0] for item in served["paths"].values() for op in item.values()} == {
        "workflows", "executions", "events", "agents", "schedules", "metrics"}
    with override_settings(ROOT_URLCONF="switchyard.urls"):
        demo = SchemaGenerator().get_schema(request=None, public=True)
    assert "/api/v1/executions" in demo["paths"]
    assert json.dumps(served, sort_keys=True) == json.dumps(demo, sort_keys=True, cls=JSONEncoder).replace(
        "/api/v1/", f"{PREFIX}/")
    assert client.get(f"{PREFIX}/schema")["Content-Type"] == "application/vnd.oai.openapi; charset=utf-8"


def test_switchyards_schema_leaves_the_hosts_own_settings_alone(client):
    assert client.get(f"{PREFIX}/schema").status_code == 200
    assert spectacular_settings.TITLE == "Host API"
    assert spectacular_settings.ENUM_NAME_OVERRIDES == HOSTILE_SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]
    assert set(plumbing.load_enum_name_overrides().values()) == {"HostStatusEnum"}  # not Switchyard's, cached
    host_schema = HostSchemaGenerator(patterns=[]).get_schema(request=None, public=True)
    assert host_schema["info"]["title"] == "Host API" and host_schema["servers"] == [{"url": "https://host.example"}]


def test_the_docs_page_is_served_under_the_prefix(user):
    browser = APIClient()
    browser.force_login(user)  # a session, as after logging in at the admin
    page = browser.get(f"{PREFIX}/docs").content.decode()
    assert f"<code>{PREFIX}/executions/{{id}}</code>" in page and f'href="{PREFIX}/schema?format=json"' in page
    refused = APIClient().get(f"{PREFIX}/docs")
    assert refused.status_code == 401 and "/admin/login/?next=%2Fops%2Fv2%2Fdocs" in refused.content.decode()


@override_settings(ROOT_URLCONF="tests.api.bare_urls")
def test_the_api_at_the_root_of_a_project_without_an_admin(client, user):
    served = client.get("/schema", {"format": "json"}).json()
    assert {(method, path) for path, item in served["paths"].items() for method in item} == {
        (method, f"/{path}") for method, path in OPERATIONS}
    assert {op["tags"][0] for item in served["paths"].values() for op in item.values()} == {
        "workflows", "executions", "events", "agents", "schedules", "metrics"}
    assert client.get("/agents").json()["count"] == 0
    assert_error(client.get("/nowhere"), 404, "not_found")
    refused = APIClient().get("/docs")  # no admin to log in at: no link, rather than an error
    assert refused.status_code == 401 and "not_authenticated" in refused.content.decode()
    assert "Log in" not in refused.content.decode()


def test_the_same_checks_pass_with_the_host_settings_there_from_the_start():
    if django_settings.SETTINGS_MODULE == HOST_SETTINGS:
        pytest.skip("this is that process")
    env = {key: value for key, value in os.environ.items()
           if key not in ("DJANGO_SETTINGS_MODULE", "SWITCHYARD_REQUIRE") and not key.startswith("PYTEST_")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--ds", HOST_SETTINGS,
         "-k", "not from_the_start", str(Path(__file__).relative_to(ROOT))],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=280, stdin=subprocess.DEVNULL)
    assert done.returncode == 0 and " passed" in done.stdout and "skipped" not in done.stdout, (
        done.stdout[-8000:] + done.stderr[-4000:])
