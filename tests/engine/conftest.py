"""Fixtures of the engine's tests."""

import pytest
from django.test import override_settings


@pytest.fixture
def with_the_test_workflows():
    """The workflows of ``tests/workflows.py`` registered, as a project's workflow modules are."""
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=["tests.workflows"]):
        yield
