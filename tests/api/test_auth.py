"""Authentication and permissions: every endpoint needs a logged-in user (DRF token or session);
the token of an execution is never shown."""

import uuid

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.api.conftest import API, CheckedClient, assert_error
from workflows_app import transitions
from workflows_app.models import Event, Execution
from workflows_app.states import ExecutionStatus
from tests import UNKNOWN_ID

SOME_ID = uuid.UUID(UNKNOWN_ID)
GETS = ["/workflows", "/executions", f"/executions/{SOME_ID}", f"/executions/{SOME_ID}/operations",
        f"/executions/{SOME_ID}/graph", "/events", "/agents", "/schema", "/docs", "/no-such-path"]
POSTS = ["/executions", f"/executions/{SOME_ID}", f"/executions/{SOME_ID}/events"]


@pytest.mark.parametrize("path", GETS)
def test_every_get_without_credentials_is_401_not_authenticated(anon, path):
    response = anon.get(API + path)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    if path != "/docs":
        assert_error(response, 401, "not_authenticated")
    else:
        assert b"not_authenticated" in response.content and b"/admin/login/" in response.content


@pytest.mark.parametrize("path", POSTS)
def test_every_post_without_credentials_is_401_and_does_nothing(anon, make_execution, path):
    execution = make_execution(status=ExecutionStatus.STARTED)
    path = path.replace(str(SOME_ID), str(execution.pk))
    assert_error(anon.post(API + path, {"workflow_id": "demo", "action": "cancel", "name": "go"}, format="json"),
                 401, "not_authenticated")
    assert list(Execution.objects.values_list("status", flat=True)) == ["started"]
    assert not Event.objects.exists()


def test_a_real_token_authenticates(user):
    token = Token.objects.create(user=user)
    client = CheckedClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    response = client.post(f"{API}/executions", {"workflow_id": "demo"}, format="json")
    assert response.status_code == 201 and response.json()["created_by"] == "alice"
    assert client.get(f"{API}/executions").json()["count"] == 1


@pytest.mark.parametrize("header", ["Token nope", "Token ", "Token a b", "Bearer x"])
def test_a_bad_token_is_401(db, header):
    client = CheckedClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get(f"{API}/executions")
    assert response.status_code == 401
    if header.startswith("Token"):
        assert_error(response, 401, "authentication_failed")
    else:  # another scheme: no credentials for us
        assert_error(response, 401, "not_authenticated")


def test_a_session_authenticates_and_a_post_needs_its_csrf_token(user):
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.get(f"{API}/executions").status_code == 200
    body = assert_error(client.post(f"{API}/executions", {"workflow_id": "demo"}, format="json"), 403,
                        "permission_denied")
    assert "CSRF" in body["message"]
    assert not Execution.objects.exists()


def test_schema_and_docs_answer_a_logged_in_user(api):
    assert api.get(f"{API}/schema").status_code == 200
    assert api.get(f"{API}/docs").status_code == 200


def test_the_token_of_an_execution_never_appears_in_any_response(api, force_api, make_execution, make_operation,
                                                                 monkeypatch):
    issued = []
    real = transitions.new_token
    monkeypatch.setattr(transitions, "new_token", lambda: issued.append(real()) or issued[-1])
    execution = make_execution(status=ExecutionStatus.FAILED, token_hash="0" * 64)
    make_operation(execution=execution)
    bodies = [force_api.post(f"{API}/executions/{execution.pk}", {"action": "resume"}, format="json"),
              force_api.post(f"{API}/executions/{execution.pk}", {"action": "kill"}, format="json")]
    stored_hash = Execution.objects.get(pk=execution.pk).token_hash
    assert len(issued) == 2 and stored_hash not in ("", "0" * 64)
    bodies += [api.get(f"{API}/executions/{execution.pk}"), api.get(f"{API}/executions"),
               api.get(f"{API}/executions/{execution.pk}/operations"), api.get(f"{API}/events")]
    for response in bodies:
        assert response.status_code == 200
        text = response.content.decode()
        assert not any(token in text for token in issued) and stored_hash not in text and "token" not in text


#: What a browser asks for when it opens a link.
BROWSER = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


def test_the_docs_send_a_browser_that_is_not_logged_in_to_the_login_and_back(client, user):
    # The link `manage.py standalone` prints, opened in a browser (Django's test client: a session).
    response = client.get(f"{API}/docs", HTTP_ACCEPT=BROWSER)
    assert response.status_code == 302 and response["Location"] == "/admin/login/?next=%2Fapi%2Fv1%2Fdocs"
    assert client.get(response["Location"], HTTP_ACCEPT=BROWSER).status_code == 200  # the admin's login page
    client.force_login(user)
    page = client.get(f"{API}/docs", HTTP_ACCEPT=BROWSER)
    assert page.status_code == 200 and page["Content-Type"].startswith("text/html")


@pytest.mark.parametrize("accept", ["application/json", "application/json, */*;q=0.1"])
def test_the_docs_answer_a_client_that_asks_for_json_with_the_json_401(client, accept):
    response = client.get(f"{API}/docs", HTTP_ACCEPT=accept)
    assert_error(response, 401, "not_authenticated")
    assert response["Content-Type"] == "application/json" and response["WWW-Authenticate"] == "Token"


def test_the_docs_page_is_html_only_and_a_logged_in_json_client_is_pointed_at_the_schema(client, user):
    client.force_login(user)
    body = assert_error(client.get(f"{API}/docs", HTTP_ACCEPT="application/json"), 406, "not_acceptable")
    assert f"{API}/schema?format=json" in body["message"]
