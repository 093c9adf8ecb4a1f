"""The transition tables read back against tables written here independently of the
code, so that a change to either shows up as a failure. Pure: no database."""

import pytest

from workflows_app.states import (
    EXECUTION_ACTIVE,
    EXECUTION_TERMINAL,
    EXECUTION_TRANSITIONS,
    OPERATION_EVENT_BY_TARGET,
    OPERATION_TERMINAL,
    OPERATION_TRANSITIONS,
    EventType,
    ExecutionStatus,
    OperationState,
    execution_event_type,
)

SPEC_EXECUTION = """
pending          -> queued | started | cancelled | failed
queued           -> pending | cancelled
started          -> completed | failed | timed_out | cancelling | force_cancelling | kill_cancelling
cancelling       -> cancelled | failed | force_cancelling | kill_cancelling
force_cancelling -> cancelled | kill_cancelling
kill_cancelling  -> cancelled
cancelled | failed -> started
started          -> started
started          -> paused
paused           -> started | cancelling | force_cancelling | kill_cancelling
"""

# The operation's table, with "any non-terminal -> cancelled" and the resume resets spelled out.
SPEC_OPERATION = """
pending     -> sending
sending     -> sent
sent        -> started
started     -> succeeded | failed | rescheduled
rescheduled -> sending
sending | sent | started -> rescheduled | failed
pending | sending | sent | started | rescheduled -> cancelled
rescheduled | failed | cancelled -> pending
started | sent | sending -> pending
"""


def parse(table):
    pairs = set()
    for line in table.strip().splitlines():
        left, right = line.split("->")
        for source in left.split("|"):
            for target in right.split("|"):
                pairs.add((source.strip(), target.strip()))
    return pairs


def table_pairs(transitions):
    return {(source.value, target.value) for source, targets in transitions.items() for target in targets}


def test_execution_table_is_exactly_the_one_above():
    assert table_pairs(EXECUTION_TRANSITIONS) == parse(SPEC_EXECUTION)


def test_operation_table_is_exactly_the_one_above():
    assert table_pairs(OPERATION_TRANSITIONS) == parse(SPEC_OPERATION)


def test_every_status_and_state_has_a_row():
    assert set(EXECUTION_TRANSITIONS) == set(ExecutionStatus)
    assert set(OPERATION_TRANSITIONS) == set(OperationState)


def test_terminal_groups_are_exactly_these():
    assert EXECUTION_TERMINAL == {"completed", "failed", "cancelled", "timed_out"}
    assert EXECUTION_ACTIVE == set(ExecutionStatus) - EXECUTION_TERMINAL
    assert OPERATION_TERMINAL == {"succeeded", "failed", "cancelled"}


def test_a_terminal_state_only_leaves_by_resume():
    for state in OPERATION_TERMINAL:
        assert OPERATION_TRANSITIONS[state] <= {OperationState.PENDING}
    for status in EXECUTION_TERMINAL:
        assert EXECUTION_TRANSITIONS[status] <= {ExecutionStatus.STARTED}


@pytest.mark.parametrize("source,target", sorted(parse(SPEC_EXECUTION)))
def test_every_execution_transition_has_an_event_type(source, target):
    assert execution_event_type(ExecutionStatus(source), ExecutionStatus(target)) in EventType


def test_start_and_resume_are_told_apart():
    assert execution_event_type(ExecutionStatus.PENDING, ExecutionStatus.STARTED) == EventType.WORKFLOW_STARTED
    for source in ("failed", "cancelled", "started"):
        assert execution_event_type(ExecutionStatus(source), ExecutionStatus.STARTED) == EventType.WORKFLOW_RESUMED


def test_pause_and_unpause_have_events_of_their_own():
    assert execution_event_type(ExecutionStatus.STARTED, ExecutionStatus.PAUSED) == EventType.WORKFLOW_PAUSED
    assert execution_event_type(ExecutionStatus.PAUSED, ExecutionStatus.STARTED) == EventType.WORKFLOW_UNPAUSED


def test_every_operation_state_has_an_event_type():
    assert set(OPERATION_EVENT_BY_TARGET) == set(OperationState)
