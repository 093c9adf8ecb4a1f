"""Every error is ``{"error_code", "message"}``, and no input, however malformed, is a 500.
Paths answer with and without a trailing slash, the same way."""

import pytest
from kombu.exceptions import OperationalError
from rest_framework.test import APIClient

from tests.api.conftest import API, assert_error
from workflows_app import broker
from workflows_app import services
from workflows_app.models import Event, Execution
from workflows_app.states import ExecutionStatus
from tests import UNKNOWN_ID


@pytest.fixture
def started(make_execution):
    return make_execution(status=ExecutionStatus.STARTED)


@pytest.fixture
def post_paths(started):
    return [f"{API}/executions", f"{API}/executions/{started.pk}", f"{API}/executions/{started.pk}/events"]


def nothing_changed(started):
    assert list(Execution.objects.values_list("pk", "status")) == [(started.pk, "started")]
    assert not Event.objects.exists()


@pytest.mark.parametrize("raw", [b"{", b"{'workflow_id': 'demo'}", b"[1,]", b"NaN", b'{"timeout": Infinity}',
                                 b'{"timeout": 1e400}', b'{"workflow_id": "demo", "x": -1e999}',
                                 b'{"n": ' + b"9" * 5000 + b"}", b"\xff\xfe{}", b"[" * 100000 + b"]" * 100000])
def test_a_body_that_is_not_json_is_parse_error(api, started, post_paths, raw):
    for path in post_paths:
        assert_error(api.generic("POST", path, raw, content_type="application/json"), 400, "parse_error")
    nothing_changed(started)


@pytest.mark.parametrize("raw", [
    b'{"workflow_id": "demo", "parameters": {"agent": "\\ud800"}}',
    b'{"workflow_id": "demo", "parameters": {"\\udfff": 1}}',
    b'{"workflow_id": "demo", "deployment_id": "x\\ud800"}',
    b'{"workflow_id": "\\ud800"}',
    b'{"workflow_id": "demo", "\\ud800": 1}',
    b'{"action": "\\ud800"}',
    b'{"name": "\\ud800"}',
    b'{"name": "go", "payload": ["\\ud800"]}',
])
def test_a_lone_surrogate_which_json_allows_and_no_database_stores_is_invalid_parameters(api, started, post_paths,
                                                                                           raw):
    path = {"workflow_id": post_paths[0], "action": post_paths[1], "name": post_paths[2]}[
        next(k for k in ("workflow_id", "action", "name") if k.encode() in raw)]
    assert_error(api.generic("POST", path, raw, content_type="application/json"), 400, "invalid_parameters")
    nothing_changed(started)


def test_a_charset_that_does_not_decode_is_parse_error(api, started, post_paths):
    for charset in ["bz2_codec", "utf-16", "utf-32"]:
        for path in post_paths:
            response = api.generic("POST", path, b'{"name": "go"}', content_type=f"application/json; charset={charset}")
            assert_error(response, 400, "parse_error")
    nothing_changed(started)


@pytest.mark.parametrize("charset", ["bogus", "klingon", '"bogus"', ""])
def test_an_unknown_charset_is_parse_error_and_nothing_is_stored(api, started, post_paths, charset):
    # Django drops a charset that codecs does not know (request.encoding None): the body would be
    # read as UTF-8 although the client said it is not.
    bodies = {post_paths[0]: b'{"workflow_id": "demo"}', post_paths[1]: b'{"action": "cancel"}',
              post_paths[2]: b'{"name": "go"}'}
    for path, body in bodies.items():
        response = api.generic("POST", path, body, content_type=f"application/json; charset={charset}")
        assert "charset" in assert_error(response, 400, "parse_error")["message"]
    nothing_changed(started)


def test_a_known_charset_is_read_as_named(api, started):
    response = api.generic("POST", f"{API}/executions/{started.pk}/events", '{"name": "café"}'.encode("latin-1"),
                           content_type="application/json; charset=latin-1")
    assert response.status_code == 202 and response.json()["data"]["name"] == "café"


@pytest.mark.parametrize("body", [b"[]", b'"x"', b"null", b"0", b"-1", b"1e3", b"true", b'[{"workflow_id": "demo"}]'])
def test_a_json_body_that_is_not_an_object_is_invalid_parameters(api, started, post_paths, body):
    for path in post_paths:
        assert_error(api.generic("POST", path, body, content_type="application/json"), 400, "invalid_parameters")
    nothing_changed(started)


def test_an_empty_body_is_invalid_parameters(api, started, post_paths):
    for path in post_paths:
        assert_error(api.generic("POST", path, b"", content_type="application/json"), 400, "invalid_parameters")
        assert_error(api.post(path), 400, "invalid_parameters")
    nothing_changed(started)


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                                          "text/plain", "application/xml"])
def test_a_body_that_is_not_json_by_its_media_type_is_415(api, started, post_paths, content_type):
    for path in post_paths:
        response = api.generic("POST", path, b"workflow_id=demo", content_type=content_type)
        assert_error(response, 415, "unsupported_media_type")
    nothing_changed(started)


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
def test_a_method_a_path_does_not_take_is_405(api, started, method):
    for path in ["/workflows", "/executions", f"/executions/{started.pk}", f"/executions/{started.pk}/operations",
                 f"/executions/{started.pk}/graph", f"/executions/{started.pk}/events", "/events", "/agents"]:
        response = api.generic(method, API + path, b"{}", content_type="application/json")
        assert_error(response, 405, "method_not_allowed")
        assert "POST" in response["Allow"] or "GET" in response["Allow"]
    nothing_changed(started)


@pytest.mark.parametrize("path", ["/", "/nope", "/executions/x/y", f"/executions/{UNKNOWN_ID}/cancel",
                                  "/workflows/demo/steps", "/agents/local", "/events/1", "/v2/executions"])
def test_any_other_path_under_the_api_is_a_json_404(api, path):
    assert_error(api.get(API + path), 404, "not_found")
    assert_error(api.post(API + path, {}, format="json"), 404, "not_found")


@pytest.mark.parametrize("path", ["/workflows", "/executions", "/executions/{id}", "/executions/{id}/operations",
                                  "/executions/{id}/graph", "/events", "/agents", "/schema", "/docs"])
def test_every_path_answers_the_same_with_and_without_a_trailing_slash(api, started, path):
    path = API + path.format(id=started.pk)
    bare, slashed = api.get(path), api.get(path + "/")
    assert bare.status_code == slashed.status_code == 200, "answered, not redirected"
    if path.endswith(("/schema", "/docs")):
        assert len(bare.content) > 1000 and bare["Content-Type"] == slashed["Content-Type"]
    else:
        assert _pages_as_bare(bare.json()) == _pages_as_bare(slashed.json())


def _pages_as_bare(body):
    """A list's links to its next and previous pages repeat the path asked for, with its slash or
    without: a list longer than a page (every test module's workflows, registered in one worker)
    links to its next page either way."""
    if isinstance(body, dict):
        return {key: value.replace("/?", "?") if key in ("next", "previous") and isinstance(value, str) else value
                for key, value in body.items()}
    return body


def test_every_post_answers_the_same_with_a_trailing_slash(force_api, started):
    assert force_api.post(f"{API}/executions/", {"workflow_id": "demo"}, format="json").status_code == 201
    response = force_api.post(f"{API}/executions/{started.pk}/events/", {"name": "go"}, format="json")
    assert response.status_code == 202
    response = force_api.post(f"{API}/executions/{started.pk}/", {"action": "force-cancel"}, format="json")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"


def test_options_describes_each_endpoint_and_what_a_post_takes(api, started):
    for path in ["/workflows", "/executions", f"/executions/{started.pk}", f"/executions/{started.pk}/operations",
                 f"/executions/{started.pk}/graph", f"/executions/{started.pk}/events", "/events", "/agents"]:
        response = api.options(API + path)
        assert response.status_code == 200, path
        assert {"GET", "POST"} & set(response["Allow"].replace(" ", "").split(",")), path
    takes = api.options(f"{API}/executions").json()["actions"]["POST"]
    assert {"workflow_id", "parameters", "deployment_id", "queue", "force"} <= set(takes)
    assert set(api.options(f"{API}/executions/{started.pk}").json()["actions"]["POST"]) == {"action"}


def test_a_response_type_the_api_cannot_give_is_406(user):
    client = APIClient()
    client.force_authenticate(user)
    assert_error(client.get(f"{API}/executions", HTTP_ACCEPT="application/xml"), 406, "not_acceptable")
    body = assert_error(client.get(f"{API}/executions", {"format": "xml"}), 406, "not_acceptable")
    assert "json" in body["message"]
    assert client.get(f"{API}/executions", {"format": "json"}).status_code == 200


def test_a_bug_is_a_json_500_internal_error_and_is_logged(user, started, monkeypatch, caplog):
    def broken(execution_id, user=None):
        raise RuntimeError("the bug")

    monkeypatch.setitem(services.ACTIONS, "cancel", broken)
    client = APIClient()
    client.force_authenticate(user)
    body = assert_error(client.post(f"{API}/executions/{started.pk}", {"action": "cancel"}, format="json"), 500,
                        "internal_error")
    assert "the bug" not in body["message"], "internals are logged, not shown"
    assert any("the bug" in str(record.exc_info[1]) for record in caplog.records if record.exc_info)


def test_a_broker_that_does_not_answer_is_503(force_user, started, monkeypatch):
    def unreachable(*args, **kwargs):
        raise OperationalError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(broker, "broadcast_kill", unreachable)
    client = APIClient()
    client.force_authenticate(force_user)
    body = assert_error(client.post(f"{API}/executions/{started.pk}", {"action": "kill"}, format="json"), 503,
                        "broker_unavailable")
    assert "Connection refused" in body["message"]
