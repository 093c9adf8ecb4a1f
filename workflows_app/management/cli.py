"""What the execution commands share: calling a service on one execution, and following one."""

import sys
import time

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from workflows_app.errors import ActionRefused
from workflows_app.models import Execution, Operation
from workflows_app.states import EXECUTION_TERMINAL, ExecutionStatus


def call_action(action, execution_id) -> Execution:
    """``action(execution_id)``; an unknown id or a refused action is a one-line CommandError."""
    try:
        return action(execution_id)
    except (Execution.DoesNotExist, ValidationError, ValueError):
        raise CommandError(f"no execution {execution_id!r}") from None
    except ActionRefused as refused:
        raise CommandError(str(refused)) from None


def wait_until_completed(execution_id, out, timeout=None):
    """Follow the execution to its end (``follow``); a CommandError unless it completed."""
    status = follow(execution_id, out, timeout)
    if status != ExecutionStatus.COMPLETED:
        error = Execution.objects.get(pk=execution_id).error.splitlines()
        raise CommandError(f"execution {execution_id} ended {status}" + (f": {error[0]}" if error else ""))


def follow(execution_id, out, timeout=None):
    """Print each change of status and operation counts until the execution is terminal."""
    last = None
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        status = Execution.objects.filter(pk=execution_id).values_list("status", flat=True).get()
        counts = {}
        for state in Operation.objects.filter(execution_id=execution_id).values_list("state", flat=True):
            counts[state] = counts.get(state, 0) + 1
        line = f"{status}  " + " ".join(f"{k}={v}" for k, v in sorted(counts.items()))
        if line != last:
            out.write(line)
            sys.stdout.flush()
            last = line
        if status in EXECUTION_TERMINAL:
            return ExecutionStatus(status)
        if deadline is not None and time.monotonic() > deadline:
            raise CommandError(f"execution {execution_id} is still {status} after {timeout}s")
        time.sleep(0.3)
