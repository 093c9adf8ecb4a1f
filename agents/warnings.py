"""The warnings the agents' registry gives of an execution (``queries.warnings``, through the
``execution_warnings`` signal): steps that wait for an agent that is not there."""

import datetime

from django.db.models import Count, Min

from agents.models import Agent
from workflows_app.conf import workflows_settings
from workflows_app.models import Operation
from workflows_app.states import OperationState, StepKind, WarningCode


def unknown_agents(execution_id) -> list[dict]:
    """``unknown_agent``: steps sent to an agent (``sending`` or ``sent``) that has never been seen
    (no heartbeat ever reached a manager), or whose last heartbeat is older than
    ``WORKFLOWS["AGENT_OFFLINE_AFTER_SECONDS"]``: nothing will run them until an agent of that
    name comes. One warning per such agent, in the order of their names; ``step`` is its waiting
    step first by name, and the message counts the others. Steps on the managers' queue and
    child executions wait for no agent. Two queries (one when no step is sent)."""
    waiting = (Operation.objects.filter(execution_id=execution_id, kind=StepKind.OPERATION,
                                        state__in=[OperationState.SENDING, OperationState.SENT])
               .exclude(agent__in=["", workflows_settings.MANAGEMENT_QUEUE]).order_by()
               .values_list("agent").annotate(first=Min("name"), count=Count("id")))
    waiting = {agent: (first, count) for agent, first, count in waiting}
    if not waiting:
        return []
    seen = dict(Agent.objects.filter(name__in=waiting).values_list("name", "last_heartbeat"))
    threshold = Agent.objects.online_threshold()
    found = []
    for agent, (step, count) in sorted(waiting.items()):
        beat = seen.get(agent)
        if beat is not None and beat >= threshold:
            continue
        if beat is None:  # no row, or a row no heartbeat ever set
            why = "which has never been seen"
        else:
            why = (f"which has been offline since {beat.astimezone(datetime.timezone.utc):%Y-%m-%d %H:%M:%S} UTC "
                   f"(no heartbeat for more than {workflows_settings.AGENT_OFFLINE_AFTER_SECONDS:g}s)")
        others = f" and {count - 1} other step{'s' if count > 2 else ''}" if count > 1 else ""
        found.append({"code": WarningCode.UNKNOWN_AGENT.value, "step": step,
                      "message": f"step {step!r}{others} wait{'s' if count == 1 else ''} for agent {agent!r}, {why}"})
    return found
