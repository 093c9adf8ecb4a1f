"""What waits for the limits of operations, as operators see it: the warnings of an execution
(``rate_limited``, ``concurrency_limited``: ``queries.warnings``, through the
``execution_warnings`` signal) and the counts the metrics give."""

from django.db.models import Count, Min

from workflows_app.models import Operation
from workflows_app.states import FLOW_LIMITS, OPERATION_WAITING_TO_SEND, FlowWait, WarningCode

#: What a step holds back for: the warning that says so.
WARNINGS = {FlowWait.RATE_LIMIT: WarningCode.RATE_LIMITED, FlowWait.CONCURRENCY: WarningCode.CONCURRENCY_LIMITED}


def waiting(operations):
    """Those of ``operations`` (a queryset) that a limit holds back now."""
    return operations.filter(state__in=OPERATION_WAITING_TO_SEND, flow_wait__in=FLOW_LIMITS)


def warnings(execution_id) -> list[dict]:
    """One warning per key that holds steps of the execution back, in the order of the keys:
    ``step`` is its first waiting step by name, and the message counts the others. One query."""
    rows = (waiting(Operation.objects.filter(execution_id=execution_id)).order_by()
            .values_list("flow_wait", "rate_key", "concurrency_key", "operation")
            .annotate(first=Min("name"), count=Count("id")))
    found = []
    for reason, rate_key, concurrency_key, operation, step, count in sorted(rows):
        key = rate_key if reason == FlowWait.RATE_LIMIT else concurrency_key
        others = f" and {count - 1} other step{'s' if count > 2 else ''}" if count > 1 else ""
        found.append({"code": WARNINGS[reason].value, "step": step,
                      "message": f"step {step!r}{others} of operation {operation!r} wait{'s' if count == 1 else ''} "
                                 f"for {FlowWait(reason).label} (key {key})"})
    return found


def warn(sender, execution_id, **kwargs):
    """The ``execution_warnings`` receiver."""
    return warnings(execution_id)


def counts(operations) -> dict:
    """``(operation, reason) -> steps`` held back, of ``operations`` (a queryset)."""
    return {(operation, reason): count for operation, reason, count in
            waiting(operations).order_by().values_list("operation", "flow_wait").annotate(count=Count("id"))}
