"""The command lines ``manage.py standalone`` prints can be pasted as they are: with the
virtualenv not activated (``make start``), they name the interpreter that runs the stack."""

import os
import sys

from workflows_app.management.commands.standalone import _manage_py


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
