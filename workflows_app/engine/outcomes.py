"""What an attempt's function did, as the fields of an ``outcome`` report (``workflows_app.wire``):
the one reading of an operation's return and exceptions, wherever it ran — on an agent
(``agents.runner``) or in a manager's pass (``workflows_app.local_steps``).

* it returned a storable value: ``succeeded`` with it as ``result`` (one ``values.check`` refuses
  fails for good: retrying would only make it again);
* ``OperationCancelled``: ``cancelled`` (its execution, or the step, is being cancelled);
* ``RecoverableError``: a retryable failure, with its ``retry_after``;
* ``NonRecoverableError``: a failure that is not retried;
* any other ``Exception``: retryable only when its type is in the operation's ``retry_for``.
"""

import traceback

from workflows_app import values, wire
from workflows_app.errors import NonRecoverableError, OperationCancelled, RecoverableError, ValueRefused


def call(definition, ctx, args, kwargs) -> dict:
    """Run ``definition.func(ctx, *args, **kwargs)``; what it did. A ``BaseException`` that is not
    an ``Exception`` (SystemExit, KeyboardInterrupt, a timeout's interrupt) goes through: what it
    means is the caller's."""
    try:
        result = definition.func(ctx, *args, **kwargs)
    except OperationCancelled as exc:
        return {**failed(exc, retryable=False), "outcome": wire.Outcome.CANCELLED}
    except RecoverableError as exc:
        return {**failed(exc, retryable=True), "retry_after": exc.retry_after}
    except NonRecoverableError as exc:
        return failed(exc, retryable=False)
    except Exception as exc:
        return failed(exc, retryable=isinstance(exc, definition.retry_for or ()))
    return succeeded(result)


def succeeded(result) -> dict:
    try:
        values.check(result, "result")
    except ValueRefused as refused:  # it could not be stored: retrying would only make it again
        return {"outcome": wire.Outcome.FAILED, "error": unstorable_result(refused), "retryable": False}
    return {"outcome": wire.Outcome.SUCCEEDED, "result": result}


def failed(exc, *, retryable) -> dict:
    """A failure raised as ``exc`` (inside its ``except`` block: the traceback is the current one)."""
    kind = type(exc)
    error = {"type": kind.__name__, "class": f"{kind.__module__}.{kind.__qualname__}", "message": str(exc),
             "traceback": traceback.format_exc()}
    return {"outcome": wire.Outcome.FAILED, "error": values.clean_error(error), "retryable": retryable}


def unstorable_result(refused) -> dict:
    """The error of an attempt whose result ``values.check`` refused (``refused``)."""
    return {"type": "ValueRefused", "message": f"the operation's {refused}", "traceback": ""}
