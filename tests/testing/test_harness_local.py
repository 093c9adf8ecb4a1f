"""Local steps in the ``switchyard`` fixture: they run inside the harness' pass over their
execution, as they do inside a manager's — with the harness' clock, its fakes, the step's
timeout, ``ctx.patched`` and the replay check — and a call or a canvas chooses where a step runs."""

import signal
from datetime import timedelta

import pytest
from django.test import override_settings

from tests.local_step_workflows import LOCAL_CODE_VERSION_ENV, local_add
from workflows_app.conf import workflows_settings
from workflows_app.engine import dispatcher, live
from workflows_app.engine.context import WorkflowContext
from workflows_app.errors import RegistrationError
from workflows_app.sdk import operation
from workflows_app.testing.harness import INCARNATION, HarnessError

#: The moves of one attempt of a step, in order.
ONE_ATTEMPT = ["task_sending", "task_sent", "task_started", "task_succeeded"]


@pytest.fixture(autouse=True)
def with_the_local_step_workflows():
    with override_settings(SWITCHYARD_WORKFLOW_MODULES=["tests.local_step_workflows"]):
        yield


@pytest.fixture
def passes(monkeypatch):
    """The passes the harness ran, by execution id (each an ``advance`` the engine sent)."""
    ran = []
    turns = dispatcher.turns

    def counted(execution_id):
        ran.append(str(execution_id))
        return turns(execution_id)

    monkeypatch.setattr(dispatcher, "turns", counted)
    return ran


@pytest.fixture
def deploy(monkeypatch):
    """``deploy("2")``: version 2 of ``local_deploy`` runs from now on, as in a new process (no live run)."""

    def to(version):
        monkeypatch.setenv(LOCAL_CODE_VERSION_ENV, version)
        live.clear()

    return to


def step_events(result, step):
    """The moves of ``step``'s attempts (its ``task_*`` events), in order."""
    return [event.type for event in result.events if event.operation == step and event.type.startswith("task_")]


def test_a_chain_of_local_steps_runs_to_its_end_in_one_pass(switchyard, passes):
    result = switchyard.run("local_chain", {"n": 5})

    assert result.status == "completed", result.error
    assert result.payload == {"total": 10}
    assert [result.result(f"add-{i}") for i in range(5)] == [0, 1, 3, 6, 10]
    for i in range(5):
        operation = result.operations[f"add-{i}"]
        assert (operation.state, operation.attempt, operation.local) == ("succeeded", 1, True)
        assert operation.agent == workflows_settings.MANAGEMENT_QUEUE, "a manager runs it"
        assert step_events(result, f"add-{i}") == ONE_ATTEMPT
    # One advance: the pass it asked for ran every step, one commit each, and ended the workflow.
    assert passes == [str(result.id)]
    assert result.event_types()[-1] == "workflow_completed"


def test_each_turn_of_the_pass_goes_on_from_where_the_last_stopped(switchyard, monkeypatch):
    """As on a manager, the run of the workflow function is kept between the turns of its pass
    (each turn's commit keeps it): a chain of N local steps calls ``ctx.execute`` N times, not
    once more per step already done (a replay from the top each turn: N(N+1)/2, and a long chain's
    test slow for it)."""
    calls = []
    execute = WorkflowContext.execute

    def counted(self, name, *args, **kwargs):
        calls.append(name)
        return execute(self, name, *args, **kwargs)

    monkeypatch.setattr(WorkflowContext, "execute", counted)
    result = switchyard.run("local_chain", {"n": 20})

    assert result.status == "completed", result.error
    assert calls == [f"add-{i}" for i in range(20)]


def test_a_fake_stands_in_for_a_local_operation(switchyard):
    fake = switchyard.fake(local_add, returns=42)
    result = switchyard.run("local_chain", {"n": 2})

    assert result.payload == {"total": 42}
    assert fake.calls == [((0, 0), {}), ((42, 1), {})], "called with what the workflow passed on"
    assert [(op.local, op.result) for op in result.operations.values()] == [(True, 42), (True, 42)]


def test_a_local_steps_retry_falls_due_on_the_harness_clock(switchyard):
    result = switchyard.run("local_patient", {"retry_interval": 600})

    assert result.status == "completed", result.error
    assert result.payload == {"attempt": 2}
    operation = result.operations["flaky"]
    assert (operation.local, operation.attempt, operation.current_retries) == (True, 2, 1)
    assert operation.started_at - operation.rescheduled_at >= timedelta(seconds=600)
    assert step_events(result, "flaky") == ["task_sending", "task_sent", "task_started", "task_rescheduled",
                                            *ONE_ATTEMPT]
    logs = [event for event in result.events if event.type == "log" and event.message == "second time lucky"]
    assert [event.data for event in logs] == [{"attempt": 2}], "ctx.log of a local step"


def test_the_timeout_interrupts_a_local_step_in_its_pass(switchyard, tmp_path):
    """A step blocked in a 5 s sleep, with a timeout of 0.2 s: each attempt is interrupted where it
    is (it never reaches its end) and fails ``OperationTimeout``, retried by its policy."""
    result = switchyard.run("local_timed_out", {"marker_dir": str(tmp_path), "seconds": 5, "timeout": 0.2})

    assert result.status == "failed"
    assert "'sleep' failed: OperationTimeout" in result.error
    operation = result.operations["sleep"]
    assert (operation.state, operation.attempt, operation.timeout) == ("failed", 2, 0.2)
    assert operation.error["type"] == "OperationTimeout" and operation.result is None
    ended = [event for event in result.events if event.operation == "sleep"
             and event.type in ("task_rescheduled", "task_failed")]
    assert [(event.type, event.data["attempt"], event.data["error"]["type"]) for event in ended] == [
        ("task_rescheduled", 1, "OperationTimeout"), ("task_failed", 2, "OperationTimeout")]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["1.started", "2.started"], "neither finished"


def test_an_alarm_armed_before_a_local_step_stays_armed(switchyard):
    """pytest-timeout (its ``signal`` method) arms ``SIGALRM`` around each test: the local steps a
    test runs must leave it armed, or a test that hangs after them is never stopped."""
    outer = signal.getitimer(signal.ITIMER_REAL)
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: None)
    signal.setitimer(signal.ITIMER_REAL, 3600)
    try:
        switchyard.run("local_chain", {"n": 2})
        left, _ = signal.getitimer(signal.ITIMER_REAL)
    finally:
        signal.signal(signal.SIGALRM, previous)
        signal.setitimer(signal.ITIMER_REAL, *outer)
    assert left > 3000, "the alarm armed before the local steps is still armed"


def test_ctx_patched_across_local_steps_and_the_replay_check(switchyard, deploy):
    deploy("1")
    before = switchyard.start("local_deploy")  # step a, then the event "go"
    assert before.status == "started" and sorted(before.operations) == ["a"]
    waiting = switchyard.export(before)

    deploy("2")  # the new local step c, behind ctx.patched
    switchyard.replay_check(waiting)
    assert switchyard.send_event(before, "go").payload == {"ran": [2, 6]}, "it had passed the change: no c"
    after = switchyard.start("local_deploy")
    assert after.operations["c"].local is True
    assert switchyard.send_event(after, "go").payload == {"ran": [2, 4, 6]}
    assert all(op.local and op.state == "succeeded" for op in after.refresh().operations.values())
    histories = [switchyard.export(before), switchyard.export(after)]
    switchyard.replay_check(waiting, *histories)

    deploy("3")  # c unguarded: the history from before the change does not replay
    with pytest.raises(HarnessError, match=r"2 of 3 histories") as refused:
        switchyard.replay_check(waiting, *histories)
    assert "step 'c'" in str(refused.value) and "guard the change with ctx.patched" in str(refused.value)

    deploy("4")  # b asked with other arguments: the guard's message, as for any step
    with pytest.raises(HarnessError) as changed:
        switchyard.replay_check(histories[1])
    assert ("non-deterministic workflow: step 'b' was stored as local_add args=[3, 3] kwargs={}, and this replay "
            "asked for local_add args=[3, 30] kwargs={}") in str(changed.value)


@pytest.mark.parametrize("declared", [True, False])
def test_a_local_step_that_names_an_agent_fails_the_execution_naming_it(switchyard, declared):
    result = switchyard.run("local_with_agent", {"declared": declared})

    assert result.status == "failed"
    assert "ValueError" in result.error and "step 'tally' is local" in result.error
    assert "agent='warehouse'" in result.error
    assert result.operations == {}, "nothing was stored"


@pytest.mark.parametrize("key", ["rate_key", "concurrency_key"])
def test_a_local_operation_cannot_keep_its_limits_per_agent(key):
    limit = {"rate_key": {"rate_limit": "10/s"}, "concurrency_key": {"concurrency": 2}}[key]
    with pytest.raises(RegistrationError, match=r"'harness_local_limited' is local"):
        operation(name="harness_local_limited", local=True, **limit, **{key: "agent"})(lambda ctx: None)


def test_a_call_says_where_its_step_runs_whatever_the_operation_declares(switchyard):
    result = switchyard.run("local_overridden")

    assert result.status == "completed", result.error
    assert result.payload == {"sent": 3, "here": 6, "asked": 12}
    sent, here, asked = (result.operations[name] for name in ("sent", "here", "asked"))
    # local=False: sent to the managers' queue as any step, run through the agents' runner.
    assert (sent.local, sent.agent, sent.incarnation) == (False, workflows_settings.MANAGEMENT_QUEUE, INCARNATION)
    # As declared, and local=True on a call of an operation that is not: in the pass.
    for step in (here, asked):
        assert (step.local, step.agent) == (True, workflows_settings.MANAGEMENT_QUEUE)
        assert step.incarnation != INCARNATION, "no agent ran it"
    assert [step_events(result, name) for name in ("sent", "here", "asked")] == [ONE_ATTEMPT] * 3
    started = {event.operation: event.data for event in result.events if event.type == "task_started"}
    assert "local" not in started["sent"] and started["here"]["local"] is True


def test_a_canvas_of_local_operations_runs_in_the_pass(switchyard, passes):
    result = switchyard.run("local_canvas")

    assert result.status == "completed", result.error
    assert result.payload == {"sum": 113}
    assert sorted(result.operations) == ["0:local_add", "1:local_add", "2:local_add"]
    assert all(op.local and op.agent == workflows_settings.MANAGEMENT_QUEUE and op.state == "succeeded"
               for op in result.operations.values())
    assert passes == [str(result.id)], "the chain ran in the pass of its one advance"


def test_a_dry_run_does_not_run_a_local_step(switchyard):
    fake = switchyard.fake(local_add, returns=42)
    result = switchyard.run("local_chain", {"n": 3}, dry_run=True)

    assert result.status == "completed", result.error
    assert result.execution.is_dry_run
    assert fake.calls == [], "a dry run runs no operation, local or not"
    assert [(op.local, op.state, op.result) for op in result.operations.values()] == [(True, "succeeded", None)] * 3
    assert result.payload == {"total": None}


def test_a_local_steps_timeout_defaults_to_the_setting_and_its_own_wins(switchyard):
    with override_settings(WORKFLOWS={"LOCAL_STEP_TIMEOUT": 7}):
        defaulted = switchyard.run("local_mixed")
        own = switchyard.run("local_slow", {"seconds": 0, "timeout": 3})
    assert defaulted.status == "completed" and own.status == "completed"
    timeouts = {name: (op.local, op.timeout) for name, op in defaulted.operations.items()}
    assert timeouts == {"a": (True, 7), "b": (False, None), "c": (True, 7), "d": (True, 7), "e": (False, None)}
    assert own.operations["slow"].timeout == 3

    again = switchyard.run("local_chain", {"n": 1})
    assert again.operations["add-0"].timeout == 30, "WORKFLOWS['LOCAL_STEP_TIMEOUT'] by default"


def test_an_exported_history_says_which_steps_were_local(switchyard):
    result = switchyard.run("local_mixed", {})
    steps = {step["name"]: step["local"] for step in switchyard.export(result)["steps"]}
    assert steps == {"a": True, "b": False, "c": True, "d": True, "e": False}
    switchyard.replay_check(switchyard.export(result))  # and it loads back, and replays


def test_a_local_step_cancelled_in_the_pass_that_asked_for_it_never_runs(switchyard):
    add = switchyard.fake("local_add", returns=4)
    result = switchyard.run("local_cancelled_at_once")
    assert result.status == "completed"
    assert result.payload["after"] == 4  # (a replay's cancel_step of an ended step says False)
    assert result.operations["a"].state == "cancelled"
    assert "cancelled by the workflow" in result.operations["a"].error["message"]
    assert add.calls == [((2, 2), {})]  # "a" never ran; "b" did


@pytest.mark.parametrize("how", ["returns", "logs"])
@pytest.mark.parametrize("which", ["nan", "nul", "surrogate", "three_mb"])
def test_a_value_a_local_step_cannot_store_fails_it_for_good_naming_why(switchyard, which, how):
    """The one value check, as for an agent's report: a result (or a log's data) that may not be
    stored fails the step, not retried, and the execution names it; nothing half-stored."""
    result = switchyard.run("local_bad_value", {"which": which, "how": how})
    assert result.status == "failed"
    step = result.operations["bad"]
    assert (step.state, step.attempt, step.result) == ("failed", 1, None)
    assert step.error["type"] == "ValueRefused"
    assert "bad" in result.error


def test_local_that_is_not_a_boolean_fails_the_execution_naming_the_step(switchyard):
    result = switchyard.run("local_not_a_boolean")
    assert result.status == "failed"
    assert "step 'x': local must be True, False or None, not 'yes'" in result.error
    assert result.operations == {}
