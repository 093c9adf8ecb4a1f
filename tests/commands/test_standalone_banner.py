"""The command lines ``manage.py standalone`` prints can be pasted as they are: with the
virtualenv not activated (``make start``), they name the interpreter that runs the stack. Its
terminal shows the web server's warnings and errors, not what a browser does in normal use."""

import io
import logging
import os
import sys
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.http import HttpResponse
from django.test import RequestFactory
from django.utils.log import log_response

from workflows_app.management.commands.standalone import _manage_py
from workflows_app.management.supervisor import LogRelay


def test_an_interpreter_that_is_not_on_path_is_named_by_its_path(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))            # no "python" there
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(tmp_path / "manage.py"), "standalone"])
    assert _manage_py() == f"{sys.executable} manage.py"


def test_the_python_on_path_is_just_python(monkeypatch, tmp_path):
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").symlink_to(sys.executable)
    monkeypatch.setenv("PATH", str(venv_bin))            # as after ". .venv/bin/activate"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "executable", str(venv_bin / "python"))
    monkeypatch.setattr(sys, "argv", ["manage.py", "standalone"])
    assert _manage_py() == "python manage.py"
    monkeypatch.setenv("PATH", os.defpath)                # not activated: its path, relative
    assert _manage_py() == ".venv/bin/python manage.py"


# --- the web server's request log on the terminal -----------------------------------------------------

@pytest.fixture
def request_log(tmp_path):
    """``log(status, path)``: Django's record of a response (``django.request``) as the stack's web
    server logs it, in the project's format, to ``var/logs/web.log``; ``terminal()``: what the
    supervisor shows of that log on the terminal (its warnings and errors)."""
    path = tmp_path / "web.log"
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter(settings.LOGGING["formatters"]["plain"]["format"]))
    logger = logging.getLogger("django.request")
    logger.addHandler(handler)
    terminal = io.StringIO()
    relay = LogRelay("web", path, terminal, verbose=False)

    def log(status, path):
        log_response("%s: %s", HttpResponse(status=status).reason_phrase, path, response=HttpResponse(status=status),
                     request=RequestFactory().get(path))

    def shown():
        handler.flush()
        relay.relay()
        return terminal.getvalue()

    yield SimpleNamespace(log=log, terminal=shown, file=path)
    logger.removeHandler(handler)
    handler.close()
    relay.close()


def test_what_a_browser_does_in_normal_use_is_not_a_warning_on_the_terminal(request_log):
    """A favicon that is not there, a page that asks for a login: in the log file, not on the terminal."""
    for status, path in [(404, "/favicon.ico"), (401, "/api/v1/executions"), (403, "/api/v1/docs"),
                         (404, "/no/such/page"), (400, "/api/v1/executions"), (500, "/favicon.ico"),
                         (500, "/api/v1/executions")]:
        request_log.log(status, path)
    assert [line.split(" django.request ", 1)[1] for line in request_log.terminal().splitlines()] == [
        "Not Found: /no/such/page", "Bad Request: /api/v1/executions", "Internal Server Error: /favicon.ico",
        "Internal Server Error: /api/v1/executions"]
    logged = request_log.file.read_text()
    for line in ("Not Found: /favicon.ico", "Unauthorized: /api/v1/executions", "Forbidden: /api/v1/docs"):
        assert f" WARNING django.request {line}\n" in logged, "the log file keeps them"
