"""The authoring surface: what ``workflows_app.sdk`` exports, and registration by name."""

import re
from pathlib import Path

import pytest

from workflows_app import registry, sdk
from workflows_app.engine.context import WorkflowContext
from workflows_app.errors import ParameterError, RegistrationError


def test_the_public_surface_is_pinned():
    assert sdk.__all__ == ["workflow", "operation", "RecoverableError", "NonRecoverableError",
                           "OperationCancelled", "EventTimeout", "StepFailed", "NonDeterministicWorkflow",
                           "register_status_listener", "unregister_status_listener"]
    for name in sdk.__all__:
        assert getattr(sdk, name) is not None


def test_workflow_code_sees_the_documented_ctx_and_nothing_else():
    """``ctx`` is a front door: each public name is in the guide for workflow authors, and its
    one attribute is the run behind it (``engine.replay``), which the guide never names."""
    guide = (Path(__file__).resolve().parents[2] / "docs" / "writing-workflows.md").read_text()
    documented = set(re.findall(r"`ctx\.(\w+)", guide))
    public = {name for name in dir(WorkflowContext) if not name.startswith("_")}
    assert public - documented == set()
    assert set(vars(WorkflowContext(None))) == {"_replay"}


def test_decorators_work_with_and_without_parentheses():
    def bare(ctx):
        return 1

    def named(ctx, x):
        return x

    assert sdk.operation(bare).name == "bare"
    assert sdk.operation(name="sdk-test-named", max_retries=7)(named).max_retries == 7
    assert registry.get_operation("sdk-test-named").func is named


def test_two_registrations_under_one_name_are_an_error_at_import():
    def first(ctx):
        pass

    def second(ctx):
        pass

    sdk.operation(name="sdk-test-twice")(first)
    with pytest.raises(RegistrationError, match="registered twice"):
        sdk.operation(name="sdk-test-twice")(second)
    with pytest.raises(RegistrationError):
        sdk.workflow(name="sdk-test-wf", failure_mode="sometimes")(first)


def test_workflow_parameters_come_from_the_signature():
    def install(ctx, size, region="eu", *, count=1):
        pass

    wf = sdk.workflow(name="sdk-test-install")(install)
    assert wf.parameters() == [
        {"name": "size", "required": True, "default": None},
        {"name": "region", "required": False, "default": "eu"},
        {"name": "count", "required": False, "default": 1},
    ]
    wf.check_parameters({"size": "small"})
    with pytest.raises(ParameterError, match="missing required parameter\\(s\\): size"):
        wf.check_parameters({})
    with pytest.raises(ParameterError, match="unknown parameter\\(s\\): colour"):
        wf.check_parameters({"size": "s", "colour": "red"})


def test_an_operation_makes_celery_signatures():
    def mul(ctx, x, y):
        return x * y

    op = sdk.operation(name="sdk-test-mul")(mul)
    sig = op.s(2)
    assert sig.task == "sdk-test-mul" and sig.args == (2,) and not sig.immutable
    assert op.si(2, 3).immutable
