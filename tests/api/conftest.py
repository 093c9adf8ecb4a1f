"""Fixtures of the REST API tests.

Every request a test makes through ``api``, ``force_api`` or ``anon`` is checked against the
OpenAPI schema the API publishes (``/api/v1/schema``): its status must be documented for that
operation, and its body must match the documented schema (timestamps ISO 8601 in UTC). What a
fuzzer run against the schema would check, on every response of this suite.

The tests are not transactional: ``transaction.on_commit`` callbacks (the Celery messages) do
not run, so no broker is needed; ``kill`` broadcasts at once, so its broadcast is recorded.
"""

import datetime
import functools
import re

import jsonschema
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.cache import cache
from rest_framework.test import APIClient

from workflows_app import broker, registry
from workflows_app.api.schema import SchemaGenerator

API = "/api/v1"
FORCE = "workflows_app.force_execution"
#: The permissions of each kind of user (``workflows_app.permissions``), by codename.
VIEWER = ("view_execution",)
OPERATOR = ("view_execution", "add_execution", "change_execution")
FORCER = OPERATOR + ("force_execution",)
#: The queries a request of a user who is not a superuser makes for its permissions: Django's
#: ModelBackend reads the user's own and its groups' once per request (per user object).
PERMISSION_QUERIES = 2

_schema = None


def openapi():
    """The published schema (generated once)."""
    global _schema
    if _schema is None:
        _schema = SchemaGenerator().get_schema(request=None, public=True)
    return _schema


def _json_schema(node):
    """An OpenAPI 3.0 schema object as JSON Schema: ``nullable`` becomes a null alternative."""
    if isinstance(node, list):
        return [_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: _json_schema(value) for key, value in node.items() if key not in ("nullable", "example")}
    if node.get("nullable"):
        return {"anyOf": [converted, {"type": "null"}]}
    return converted


_format_checker = jsonschema.FormatChecker()


@_format_checker.checks("date-time", raises=ValueError)
def _utc_timestamp(value):
    """ISO 8601, in UTC."""
    if not isinstance(value, str):
        return True
    parsed = datetime.datetime.fromisoformat(value)
    return value.endswith("Z") and parsed.utcoffset() == datetime.timedelta(0)


def _operation_for(method, path):
    matches = [template for template in openapi()["paths"]
               if re.fullmatch(re.escape(template).replace(r"\{id\}", "[^/]+") + "/?", path)]
    if not matches:
        return None, None
    # A path without a parameter wins over a template that matches it too: executions/bulk, not executions/{id}.
    template = min(matches, key=lambda t: t.count("{"))
    return template, openapi()["paths"][template].get(method.lower())


def assert_conforms(response):
    """The response's status is documented for its operation and its body matches the schema."""
    request = response.wsgi_request
    template, operation = _operation_for(request.method, request.path)
    if operation is None or template in ("/api/v1/schema", "/api/v1/docs"):
        return  # not an operation of the schema (an unknown path, an unsupported method)
    documented = operation["responses"]
    status = str(response.status_code)
    assert status in documented, f"{request.method} {template} answered {status}, documented: {sorted(documented)}"
    content = documented[status].get("content", {}).get("application/json")
    if not documented[status].get("content") and not response.content:
        return  # documented without a body (204 No Content), and none given
    assert content, f"{request.method} {template} {status} documents no JSON body"
    errors = sorted(_validator(request.method, template, status).iter_errors(response.json()), key=lambda e: list(e.path))
    assert not errors, f"{request.method} {template} {status}: " + "; ".join(
        f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors[:5])


@functools.cache
def _validator(method, template, status):
    """The validator of one operation's documented response body, made once (the schema is)."""
    content = openapi()["paths"][template][method.lower()]["responses"][status]["content"]["application/json"]
    root = {"components": _json_components(), **_json_schema(content["schema"])}
    return jsonschema.Draft202012Validator(root, format_checker=_format_checker)


@functools.cache
def _json_components():
    """The schema's components as JSON Schema (``_json_schema`` builds new containers: the
    published schema is left as it is)."""
    return _json_schema(openapi()["components"])


class CheckedClient(APIClient):
    """An APIClient whose every response is checked against the schema."""

    def request(self, **kwargs):
        response = super().request(**kwargs)
        assert_conforms(response)
        return response


def assert_error(response, status, error_code):
    """The one error shape, with this status and code."""
    assert response.status_code == status, (response.status_code, response.content)
    body = response.json()
    assert set(body) == {"error_code", "message"}, body
    assert body["error_code"] == error_code, body
    assert isinstance(body["message"], str) and body["message"] and "\n" not in body["message"], body
    return body


def make_user(username, codenames=(), **fields):
    """A user holding these permissions (``app_label.codename`` or a codename of ``workflows_app``)."""
    user = get_user_model().objects.create_user(username, **fields)
    for name in codenames:
        app_label, _, codename = name.rpartition(".")
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app_label or "workflows_app",
                                                         codename=codename))
    return get_user_model().objects.get(pk=user.pk)  # a fresh object: permissions are cached


#: A workflow registered with a permission of its own (``guarded``), and that permission.
GUARDED = "guarded"
GUARDED_PERMISSION = "auth.change_user"


def register_guarded(monkeypatch):
    """Register ``GUARDED`` with ``@workflow(permission=GUARDED_PERMISSION)`` for one test."""
    monkeypatch.setitem(registry._workflows, GUARDED, None)  # the registration is undone after the test

    @registry.workflow(name=GUARDED, permission=GUARDED_PERMISSION)
    def guarded(ctx, n=1):
        return n

    return GUARDED


@pytest.fixture
def guarded(monkeypatch):
    return register_guarded(monkeypatch)


@pytest.fixture
def user(db):
    """An operator: may view, start, cancel, resume and send events, not force."""
    return make_user("alice", OPERATOR)


@pytest.fixture
def force_user(db):
    return make_user("root", FORCER)


@pytest.fixture
def api(user):
    """Logged in as an operator (without the force permission)."""
    client = CheckedClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def force_api(force_user):
    """Logged in as an operator with ``workflows_app.force_execution``."""
    client = CheckedClient()
    client.force_authenticate(force_user)
    return client


@pytest.fixture
def anon(db):
    return CheckedClient()


@pytest.fixture(autouse=True)
def uncounted_requests():
    """Each test starts with no request counted by the API's throttles (``workflows_app.api.
    throttling``): their counts live in Django's cache, which outlives a test, and a user's id
    comes again in a later test (SQLite reuses the ids a rollback freed). The rates stay the
    production defaults, which no test's own requests reach."""
    cache.clear()


@pytest.fixture(autouse=True)
def kill_broadcasts(monkeypatch):
    """``kill`` broadcasts to the workers at once (not on commit): recorded here, not sent."""
    sent = []
    monkeypatch.setattr(broker, "broadcast_kill", lambda execution_id, attempts=(), **kw: sent.append(
        (str(execution_id), list(attempts), kw)))
    return sent


@pytest.fixture
def advances(monkeypatch):
    """``send_advance`` calls (which run on commit), recorded instead of sent."""
    sent = []
    monkeypatch.setattr(broker, "send_advance", lambda execution_id, workflow_id=None: sent.append(str(execution_id)))
    return sent
