import pytest
from django.test import override_settings


@pytest.fixture(autouse=True)
def with_the_harness_workflows():
    """The workflows of ``tests/testing/workflows.py`` registered, as a project's are."""
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=["tests.testing.workflows"]):
        yield
