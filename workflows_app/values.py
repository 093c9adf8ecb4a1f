"""What gets in: the one check of every JSON value Switchyard stores.

Parameters, event payloads, an execution's payload, operations' arguments, results and errors,
``ctx.log`` data — from the API, the admin, the commands, workflow code or an agent's report —
go through :func:`check` before they are stored. A value is refused when a database or a
response could not hold it, or when it is too big to be handled safely:

- a NUL character (``\\u0000``): PostgreSQL refuses it in text and JSON;
- a lone surrogate (``\\ud800``, what ``os.fsdecode`` gives for a file name that is not UTF-8):
  no database stores it, and no response can encode it;
- NaN or an infinity: not JSON;
- nesting deeper than :data:`MAX_DEPTH` objects and arrays: what a page or an API answer that
  shows the value could not render;
- more than ``WORKFLOWS["MAX_PAYLOAD_BYTES"]`` bytes as JSON;
- anything that is not JSON (a date, a set, an object).

Text that is stored as text rather than JSON (an error's message, an execution's error) is not
refused but cleaned by :func:`clean_text`: a failure must always be recordable.

An agent's name is a queue's name on the broker, which the broker and Celery share with names of
their own: :func:`check_agent_name` is its one check, at every door that takes one.
"""

import json
import math
import re

from workflows_app.conf import workflows_settings
from workflows_app.errors import ValueRefused

#: Deepest nesting of objects and arrays accepted.
MAX_DEPTH = 64
#: Longest error text stored (an error's message or traceback, an execution's error); longer is cut.
MAX_TEXT = 64 * 1024

_SCALARS = (str, int, float, bool, type(None))


def string_problem(text: str) -> str | None:
    """Why the string ``text`` cannot be stored, or None."""
    if "\x00" in text:
        return "null characters (\\u0000) are not allowed"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "lone surrogates (\\ud800-\\udfff) are not allowed"
    return None


def check(value, place: str, *, limit: int | None = None):
    """``value`` itself if it may be stored; else ``ValueRefused`` naming ``place`` (and, inside
    the value, where: ``parameters.servers[2].name``) and why. ``limit``: the largest size in
    bytes, by default ``WORKFLOWS["MAX_PAYLOAD_BYTES"]``."""
    found = _structure_problem(value)
    if found is not None:
        where, reason = found
        where = where if len(where) <= 200 else where[:200] + "..."
        raise ValueRefused(place + where, reason)
    limit = workflows_settings.MAX_PAYLOAD_BYTES if limit is None else limit
    size = json_size(value)
    if size > limit:
        raise ValueRefused(place, f"{size} bytes as JSON, more than the {limit} allowed (MAX_PAYLOAD_BYTES)",
                           too_large=True)
    return value


def loads(text):
    """JSON text as a value, strictly: ``ValueError`` (with the reason) for text that is not JSON,
    for ``NaN`` and ``Infinity`` (Python's json takes them), for a number too large for a float
    (which would become an infinity) and for nesting deeper than the interpreter can parse (a
    ``RecursionError`` otherwise). What every door that reads JSON text uses: the API's parser,
    the admin's form, the commands. The value still goes through :func:`check`."""
    if hasattr(text, "read"):
        text = text.read()
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None


def _finite_float(text):
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {text[:40]}")
    return value


def _refuse_constant(name):
    raise ValueError(f"{name} is not valid JSON")


def json_size(value) -> int:
    """The size in bytes of ``value`` (already checked) as compact UTF-8 JSON, as it is stored."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _structure_problem(value):
    """``(where, why)`` for the first thing that makes ``value`` unstorable, or None. Iterative,
    so that nesting deeper than the interpreter's recursion limit is answered too."""
    stack = [(value, "", 0)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, str):
            problem = string_problem(item)
            if problem:
                return where, problem
        elif isinstance(item, float):
            if not math.isfinite(item):
                return where, "NaN and infinities are not JSON numbers"
        elif isinstance(item, (dict, list, tuple)):
            if depth >= MAX_DEPTH:
                return where, f"nested deeper than {MAX_DEPTH} levels"
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, _SCALARS) or (isinstance(key, float) and not math.isfinite(key)):
                        return where, f"an object key must be a string, not {type(key).__name__}"
                    if isinstance(key, str) and string_problem(key):
                        return where, f"a key: {string_problem(key)}"
                    stack.append((child, f"{where}.{printable(key)}", depth + 1))
            else:
                stack.extend((child, f"{where}[{index}]", depth + 1) for index, child in enumerate(item))
        elif not isinstance(item, _SCALARS):
            return where, f"{type(item).__name__} is not a JSON value"
    return None


def printable(key) -> str:
    """A key or name as it can be shown in a message (it may be the unstorable part itself)."""
    text = str(key)[:100]
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def clean_text(text, limit: int = MAX_TEXT) -> str:
    """``text`` as it can always be stored and shown: NUL characters and lone surrogates written
    as escapes, cut to ``limit`` characters."""
    text = str(text)
    if string_problem(text):
        text = text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")
    if len(text) > limit:
        text = text[:limit] + f"... [cut: {len(text) - limit} more characters]"
    return text


def clean_error(error):
    """An operation's error ``{"type", "message", "traceback", ...}`` with its texts cleaned (an
    exception's message may quote whatever the operation had in hand)."""
    if not isinstance(error, dict):
        return error
    cleaned = {}
    for key, item in error.items():
        if isinstance(item, str):
            cleaned[key] = clean_text(item)
        elif _structure_problem(item) is None:
            cleaned[key] = item
        else:
            cleaned[key] = clean_text(repr(item))
    return cleaned


# --- agent names ------------------------------------------------------------------------------

#: What an agent name is made of: ASCII letters, digits, ``.``, ``_`` and ``-``, starting with a
#: letter or a digit. So it is a queue name on RabbitMQ and Redis as it is, a RabbitMQ permission's
#: regular expression once escaped, a directory's name (``agents.worker.local``), a command's
#: argument (never an option), and a Celery node name's first part (``NAME@host``).
AGENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
#: Longest agent name: its workers' reply queues, ``NAME.replies.<host>.<pid>``, must fit in
#: ``wire.MAX_NAME`` (200) with a host name of 64 characters.
MAX_AGENT_NAME = 100
#: Names the broker, Celery and the managers keep for themselves: (how a name is matched, the
#: text, why). ``prefix``: it starts with the text; ``suffix``: ends with it; ``part``: has it
#: inside; ``name``: is it. The managers' own (the management queue and what starts with it) are
#: read from the settings (:func:`agent_name_problem`).
RESERVED_AGENT_NAMES = (
    ("prefix", "celery", "Celery's own names start with 'celery' (its default queue 'celery', its remote control "
                         "'celery.pidbox', its events 'celeryev')"),
    ("suffix", ".pidbox", "the names of Celery's remote control end with '.pidbox'"),
    ("prefix", "amq.", "RabbitMQ keeps the names that start with 'amq.'"),
    ("part", ".replies.", "'.replies.' is in the names of the agents' reply queues (NAME.replies.<host>.<pid>)"),
    ("name", "unacked", "the Redis transport keeps 'unacked', 'unacked_index' and 'unacked_mutex'"),
    ("name", "unacked_index", "the Redis transport keeps 'unacked', 'unacked_index' and 'unacked_mutex'"),
    ("name", "unacked_mutex", "the Redis transport keeps 'unacked', 'unacked_index' and 'unacked_mutex'"),
)
_MATCH = {"prefix": str.startswith, "suffix": str.endswith, "part": str.__contains__, "name": str.__eq__}


def agent_name_problem(name) -> str | None:
    """Why ``name`` cannot be an agent's name (a queue's, on the broker), or None: see
    :data:`AGENT_NAME`, :data:`MAX_AGENT_NAME` and :data:`RESERVED_AGENT_NAMES`; and the managers'
    own names, ``WORKFLOWS["MANAGEMENT_QUEUE"]`` and every name that starts with it and a dot (its
    reports queue and exchange, ``.reports`` and ``.reporting``)."""
    if not isinstance(name, str):
        return f"an agent name is a string, not {type(name).__name__}"
    if not name:
        return "an agent name may not be empty"
    if len(name) > MAX_AGENT_NAME:
        return f"{len(name)} characters, more than the {MAX_AGENT_NAME} an agent name may have"
    if not AGENT_NAME.fullmatch(name):
        return ("an agent name has ASCII letters, digits, '.', '_' and '-' only, and starts with a letter "
                "or a digit")
    management = workflows_settings.MANAGEMENT_QUEUE
    if name == management:
        return ("it is the managers' queue (WORKFLOWS['MANAGEMENT_QUEUE']): a step that names no agent runs on "
                "a manager")
    if name.startswith(management + "."):
        return f"the names that start with '{management}.' are the managers' (their reports)"
    for how, text, why in RESERVED_AGENT_NAMES:
        if _MATCH[how](name, text):
            return why
    return None


def check_agent_name(name, place: str = "") -> str:
    """``name`` if it can be an agent's name; else ``ValueRefused`` naming ``place`` (a step, a
    parameter) and saying, on one line, which name and why: ``invalid agent name 'celery.pidbox':
    ...`` (its ``reason``, which a command prints as its error)."""
    problem = agent_name_problem(name)
    if problem is not None:
        raise ValueRefused(place, f"invalid agent name {shown_name(name)}: {problem}")
    return name


def shown_name(name) -> str:
    """``name`` as one line of a message, quoted: a newline, a NUL or a lone surrogate escaped,
    cut after 100 characters."""
    if not isinstance(name, str):
        return repr(name)[:100]
    return repr(name[:100]) + ("..." if len(name) > 100 else "")
