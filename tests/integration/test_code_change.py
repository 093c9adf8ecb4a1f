"""Changing workflow code while an execution runs, across a real manager restart: the history
of an execution waiting on the old code is checked against the new code first (``replay_check``,
as a CI step would), then the manager restarts on the new code.

The code is ``rc_deploy`` of tests/replay_workflows.py; which version a process runs is its
``SWITCHYARD_TEST_CODE_VERSION``. Version 1: step ``a``, the event ``go``, step ``b``. Version 2
adds ``c`` before the event and ``d`` after it, each behind ``ctx.patched``. An execution that
waited for ``go`` under version 1 had passed the point of ``c`` (false) and not that of ``d``
(true); one that starts under version 2 takes both.
"""

import io

import pytest
from django.core.management import call_command
from django.test import override_settings

from tests.integration.harness import WORKFLOW_MODULES, describe_execution
from tests.replay_workflows import CODE_VERSION_ENV
from workflows_app import services
from workflows_app.models import Execution, Operation, Wait
from workflows_app.states import EXECUTION_TERMINAL, ExecutionStatus, WaitOutcome

pytestmark = pytest.mark.integration

MODULES = f"{WORKFLOW_MODULES},tests.replay_workflows"
TERMINAL = [status.value for status in EXECUTION_TERMINAL]


def code(version) -> dict:
    """The environment of a process that runs ``version`` of the code."""
    return {"SWITCHYARD_WORKFLOW_MODULES": MODULES, CODE_VERSION_ENV: version}


def start_manager(stack, version):
    return stack.manage("manager", "run_manager", "--concurrency", "2", "--loglevel", "INFO", env=code(version))


def waiting_for_go(stack, execution):
    def waiting():
        return Wait.objects.filter(execution_id=execution.pk, key="event:go#1", outcome=WaitOutcome.WAITING).exists()

    stack.wait_for(waiting, timeout=60, what="the execution to wait for 'go'",
                   describe=lambda: describe_execution(execution.pk))


def replay_check(stack, name, path, version) -> tuple[int, str]:
    """``manage.py replay_check path`` in a process of its own that runs ``version`` of the code."""
    proc = stack.manage(name, "replay_check", str(path), env=code(version), expect_exit=True)
    proc.wait(timeout=120)
    return proc.returncode, proc.log_text().split("\n", 1)[1]


def steps(execution) -> list:
    return list(Operation.objects.filter(execution_id=execution.pk).order_by("pending_at", "id")
                .values_list("name", flat=True))


def test_a_change_behind_ctx_patched_keeps_a_running_execution_on_its_path_across_a_manager_restart(stack, tmp_path):
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=[WORKFLOW_MODULES, "tests.replay_workflows"]):
        manager = start_manager(stack, "1")
        old = services.start("rc_deploy", {})
        waiting_for_go(stack, old)
        assert steps(old) == ["a"]

        # Before the deploy: the waiting execution's history against the new code, and against a
        # careless version of it (c inserted before the event without ctx.patched).
        history = tmp_path / "waiting.json"
        call_command("export_execution", str(old.pk), "--output", str(history), stdout=io.StringIO())
        assert replay_check(stack, "check-v2", history, "2") == (0, f"{history}: ok\n")
        status, output = replay_check(stack, "check-v3", history, "3")
        assert status == 1 and output.startswith(
            f"{history}: non-deterministic workflow: this replay asked for step 'c', which the history does not "
            "hold, before reaching the history's wait 'event:go#1'"), output
        assert "CommandError: 1 of 1 histories do not replay with today's code" in output

        # The deploy: the manager restarts on version 2.
        stack.stop(manager)
        start_manager(stack, "2")
        new = services.start("rc_deploy", {})
        waiting_for_go(stack, new)
        assert steps(new) == ["a", "c"]

        for execution in (old, new):
            services.send_event(execution.pk, "go", "went")
        for execution in (old, new):
            done = stack.wait_for_status(execution.pk, TERMINAL, timeout=60)
            assert done.status == ExecutionStatus.COMPLETED, describe_execution(execution.pk)

    old, new = Execution.objects.get(pk=old.pk), Execution.objects.get(pk=new.pk)
    assert old.payload == {"ran": ["a", "d", "b"], "go": "went"} and steps(old) == ["a", "d", "b"]
    assert old.patches == {"before-go": False, "after-go": True}
    assert new.payload == {"ran": ["a", "c", "d", "b"], "go": "went"} and steps(new) == ["a", "c", "d", "b"]
    assert new.patches == {"before-go": True, "after-go": True}
