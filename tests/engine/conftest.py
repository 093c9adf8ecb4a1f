"""Fixtures of the engine's tests."""

import pytest
from django.test import override_settings

from tests.replay_workflows import CODE_VERSION_ENV
from workflows_app.engine import live


@pytest.fixture
def with_the_test_workflows():
    """The workflows of ``tests/workflows.py`` registered, as a project's workflow modules are."""
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=["tests.workflows"]):
        yield


@pytest.fixture
def with_the_replay_workflows():
    """The workflows whose code changes between deploys (``tests/replay_workflows.py``) registered."""
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=["tests.replay_workflows"]):
        yield


@pytest.fixture
def deploy(monkeypatch):
    """``deploy("2")``: the code of version 2 of ``tests/replay_workflows.py`` runs from now on, as
    in new processes (no live run)."""

    def to(version):
        monkeypatch.setenv(CODE_VERSION_ENV, version)
        live.clear()

    return to
