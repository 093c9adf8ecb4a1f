"""The limits an operation declares, read and checked when it is registered, and the key each of
its steps counts against.

``@operation(rate_limit="10/s", rate_key=None | "agent" | "<parameter>", concurrency=N,
concurrency_key=None | "agent" | "<parameter>")``: at most ``rate_limit`` attempts sent in any
window of the period's length, at most N attempts sent or started at once — per value of the key
(the agent the step is sent to, or a parameter of the call), or for the whole operation. The
managers keep them when they send (``workflows_app.flow.gate``).

Pure: no database, no broker.
"""

import hashlib
import inspect
import json
import re
from dataclasses import dataclass

from workflows_app.errors import RegistrationError
from workflows_app.states import StepKind

#: The key values that name no parameter: the agent a step is sent to.
KEY_AGENT = "agent"
#: The periods a rate may be given in, in seconds.
PERIODS = {"s": 1, "m": 60, "h": 3600}
#: The longest key stored (``Operation.rate_key``, ``Operation.concurrency_key``): a longer one
#: is cut and hashed.
MAX_KEY = 255

_RATE = re.compile(r"^\s*([1-9][0-9]{0,8})\s*/\s*([smh])\s*$")


@dataclass(frozen=True)
class Rate:
    """``count`` sends in any ``seconds``."""

    count: int
    seconds: int

    def __str__(self):
        unit = {seconds: unit for unit, seconds in PERIODS.items()}[self.seconds]
        return f"{self.count}/{unit}"


def parse_rate(text) -> Rate:
    """``"10/s"``, ``"600/m"``, ``"1000/h"`` as a :class:`Rate`; ``ValueError`` for anything else."""
    match = _RATE.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"a rate is <count>/s, /m or /h (10/s, 600/m, 1000/h), not {text!r}")
    return Rate(int(match.group(1)), PERIODS[match.group(2)])


@dataclass(frozen=True)
class Limits:
    """What an operation declared: ``rate`` (a :class:`Rate` or None) per ``rate_key``, and
    ``concurrency`` (an int or None) per ``concurrency_key``."""

    rate: Rate | None = None
    rate_key: str | None = None
    concurrency: int | None = None
    concurrency_key: str | None = None

    def __bool__(self):
        return self.rate is not None or self.concurrency is not None

    def as_json(self) -> dict:
        """As ``GET /workflows`` gives them."""
        return {"rate_limit": str(self.rate) if self.rate else None, "rate_key": self.rate_key,
                "concurrency": self.concurrency, "concurrency_key": self.concurrency_key}


NONE = Limits()


def check(name, func, *, rate_limit=None, rate_key=None, concurrency=None, concurrency_key=None) -> Limits:
    """The limits of the operation ``name`` (``func(ctx, ...)``), or ``RegistrationError`` naming
    the operation and the option: a malformed rate, N < 1, a key without its limit, a key that is
    neither "agent" nor one of the function's parameters."""
    def refuse(option, why):
        raise RegistrationError(f"operation {name!r}: {option}{why}")

    rate = None
    if rate_limit is not None:
        try:
            rate = parse_rate(rate_limit)
        except ValueError as exc:
            refuse("rate_limit", f" is malformed: {exc}")
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1):
        refuse("concurrency", f" must be a whole number of 1 or more, not {concurrency!r}")
    parameters = _parameters(func)
    for option, key, limit, limit_name in (("rate_key", rate_key, rate, "rate_limit"),
                                           ("concurrency_key", concurrency_key, concurrency, "concurrency")):
        if key is None:
            continue
        if limit is None:
            refuse(option, f"={key!r} needs {limit_name}, the limit it counts against")
        if not isinstance(key, str) or (key != KEY_AGENT and key not in parameters):
            refuse(option, f" must be {KEY_AGENT!r} or one of the operation's parameters "
                           f"({', '.join(parameters) or 'it has none'}), not {key!r}")
    return Limits(rate, rate_key, concurrency, concurrency_key)


def _parameters(func) -> list[str]:
    """The names of the parameters a call passes (all but the context, the first)."""
    try:
        params = list(inspect.signature(func).parameters.values())[1:]
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def governs(operation) -> bool:
    """Whether a limit governs the step ``operation`` (it counts against a key)."""
    return operation.kind == StepKind.OPERATION and bool(operation.rate_key or operation.concurrency_key)


def key_of(kind, name, func, key, args, kwargs, agent) -> str:
    """The key a step of operation ``name`` counts against for a limit (``kind``: "rate" or
    "concurrency") whose key option is ``key``: the operation's, the agent's, or the value of a
    parameter as the call binds it (its default when not given). A key too long to store is cut
    and hashed, so that two values never share one."""
    if key is None:
        value = ""
    elif key == KEY_AGENT:
        value = f"@{agent}"
    else:
        value = "=" + json.dumps(_argument(func, key, args, kwargs), sort_keys=True, default=str)
    whole = f"{kind}:{name}{value}"
    if len(whole) <= MAX_KEY:
        return whole
    digest = hashlib.sha256(whole.encode()).hexdigest()
    return f"{whole[:MAX_KEY - len(digest) - 1]}#{digest}"


def _argument(func, parameter, args, kwargs):
    try:
        bound = inspect.signature(func).bind_partial(None, *args, **kwargs)
    except TypeError:  # a call that does not fit fails when it runs; its key is its keyword
        return kwargs.get(parameter)
    bound.apply_defaults()
    return bound.arguments.get(parameter)
