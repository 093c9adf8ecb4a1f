"""Fixtures of the REST API tests.

Every request a test makes through ``api``, ``force_api`` or ``anon`` is checked against the
OpenAPI schema the API publishes (``/api/v1/schema``): its status must be documented for that
operation, and its body must match the documented schema (timestamps ISO 8601 in UTC). What a
fuzzer run against the schema would check, on every response of this suite.

The tests are not transactional: ``transaction.on_commit`` callbacks (the Celery messages) do
not run, so no broker is needed; ``kill`` broadcasts at once, so its broadcast is recorded.
"""

import copy
import datetime
import re

import jsonschema
import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from rest_framework.test import APIClient

from workflows_app import dispatch
from workflows_app.api.schema import SchemaGenerator

API = "/api/v1"
FORCE = "workflows_app.force_execution"

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
    """ISO 8601, in UTC (SPEC §8)."""
    if not isinstance(value, str):
        return True
    parsed = datetime.datetime.fromisoformat(value)
    return value.endswith("Z") and parsed.utcoffset() == datetime.timedelta(0)


def _operation_for(method, path):
    for template, item in openapi()["paths"].items():
        pattern = re.escape(template).replace(r"\{id\}", "[^/]+") + "/?"
        if re.fullmatch(pattern, path) and method.lower() in item:
            return template, item[method.lower()]
    return None, None


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
    assert content, f"{request.method} {template} {status} documents no JSON body"
    root = {"components": _json_schema(copy.deepcopy(openapi()["components"])), **_json_schema(content["schema"])}
    validator = jsonschema.Draft202012Validator(root, format_checker=_format_checker)
    errors = sorted(validator.iter_errors(response.json()), key=lambda e: list(e.path))
    assert not errors, f"{request.method} {template} {status}: " + "; ".join(
        f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors[:5])


class CheckedClient(APIClient):
    """An APIClient whose every response is checked against the schema."""

    def request(self, **kwargs):
        response = super().request(**kwargs)
        assert_conforms(response)
        return response


def assert_error(response, status, error_code):
    """The one error shape (SPEC §8), with this status and code."""
    assert response.status_code == status, (response.status_code, response.content)
    body = response.json()
    assert set(body) == {"error_code", "message"}, body
    assert body["error_code"] == error_code, body
    assert isinstance(body["message"], str) and body["message"] and "\n" not in body["message"], body
    return body


@pytest.fixture
def user(db):
    return get_user_model().objects.create_user("alice")


@pytest.fixture
def force_user(db):
    user = get_user_model().objects.create_user("root")
    user.user_permissions.add(Permission.objects.get(codename="force_execution"))
    return get_user_model().objects.get(pk=user.pk)  # a fresh object: permissions are cached


@pytest.fixture
def api(user):
    """Logged in as a user without the force permission."""
    client = CheckedClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def force_api(force_user):
    """Logged in as a user with ``workflows_app.force_execution``."""
    client = CheckedClient()
    client.force_authenticate(force_user)
    return client


@pytest.fixture
def anon(db):
    return CheckedClient()


@pytest.fixture(autouse=True)
def kill_broadcasts(monkeypatch):
    """``kill`` broadcasts to the workers at once (not on commit): recorded here, not sent."""
    sent = []
    monkeypatch.setattr(dispatch, "broadcast_kill", lambda execution_id, attempts=(), **kw: sent.append(
        (str(execution_id), list(attempts), kw)))
    return sent


@pytest.fixture
def advances(monkeypatch):
    """``send_advance`` calls (which run on commit), recorded instead of sent."""
    sent = []
    monkeypatch.setattr(dispatch, "send_advance", lambda execution_id, workflow_id=None: sent.append(str(execution_id)))
    return sent
