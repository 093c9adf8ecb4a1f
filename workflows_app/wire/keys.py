"""Keys and proofs: how a message on the broker shows who sent it, with nothing secret in it.

**Every agent has a key of its own**, derived from the **master key** and the agent's name (and,
once its key was rotated, a salt the database keeps: ``workflows_app.signing``). The master key
is ``WORKFLOWS["AGENT_MASTER_KEY"]``, by default derived from Django's ``SECRET_KEY``; only the
managers and the web process need it. An agent reads its key from ``SWITCHYARD_AGENT_KEY``
(``run_agent --key-file`` puts it there); an agent given no key derives its own from the master
key in its settings — the agent is then trusted with every agent's key.

**A proof** is an HMAC-SHA256, under one agent's key, of what a message says: its purpose and a
canonical JSON document (:func:`prove`). The managers prove the operation messages and the
answers to claims they send an agent, and each attempt a remote-control command names; the
agent proves every report. A proof names its purpose, so one made for a report is no proof of a
message, and it covers the whole document, so no field can be changed or added. The key itself
never travels: reading a queue gives no way to make a proof for anything it did not already say.
Proofs can be replayed; what they prove is idempotent (a report stored twice changes nothing, an
operation message delivered twice is fenced) or ordered (a registration older than the agent's
current run is refused: ``agents.intake``).
"""

import functools
import hashlib
import hmac
import json
import os
import re

from django.conf import settings
from django.utils.crypto import salted_hmac

from workflows_app.conf import workflows_settings

#: Where ``run_agent`` finds the agent's key (hex, :data:`KEY_CHARS` characters).
KEY_ENV = "SWITCHYARD_AGENT_KEY"
KEY_CHARS = 64
_HEX = re.compile(rf"[0-9a-f]{{{KEY_CHARS}}}")


class Purpose:
    """What a proof is for: one made for one purpose proves nothing for another."""

    OPERATION = "operation"  # a manager sends an agent an attempt: [operation id, attempt(, its grant)]
    ANSWER = "answer"  # a manager answers an agent's claim
    REPORT = "report"  # an agent reports (every kind)
    KILL = "kill"  # a manager asks an agent to kill an attempt: [operation id, attempt]
    KILL_DISPATCHER = "kill-dispatcher"  # ... a manager to kill an execution's dispatcher: execution id
    CANCEL = "cancel"  # ... to tell a running attempt it is cancelled
    RESEND = "resend"  # ... to send an attempt's outcome again
    STOP = "stop"  # ... to never start an attempt it was sent: [operation id, attempt]
    STOPPED = "stopped"  # an agent answers a stop: {agent, answers, nonce}
    RUNNING = "running"  # an agent answers what it runs: {agent, incarnation, running, nonce}


def master_key() -> bytes:
    configured = workflows_settings.AGENT_MASTER_KEY
    if configured:
        return configured.encode()
    return salted_hmac("switchyard.agent-keys", "master", secret=settings.SECRET_KEY, algorithm="sha256").digest()


def derive(name, salt="") -> str:
    """The key of agent ``name`` (``salt``: its rotation's, "" for one never rotated)."""
    return hmac.new(master_key(), f"agent\n{name}\n{salt}".encode(), hashlib.sha256).hexdigest()


def is_key(key) -> bool:
    return isinstance(key, str) and _HEX.fullmatch(key) is not None


def own_key(name) -> str:
    """This process' key as agent ``name``: ``SWITCHYARD_AGENT_KEY`` when set, else derived from
    the master key."""
    return _own_key(name, os.environ.get(KEY_ENV, ""))


@functools.lru_cache(maxsize=8)
def _own_key(name, given):
    return given or derive(name)


def canonical(document) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def prove(key, purpose, document) -> str:
    """The proof, under ``key``, that ``document`` is said for ``purpose``."""
    return hmac.new(key.encode(), purpose.encode() + b"\n" + canonical(document), hashlib.sha256).hexdigest()


def proven(proof, key, purpose, document) -> bool:
    """Whether ``proof`` is :func:`prove`'s for these (in constant time); False for anything that
    is not a proof at all (not hex of the right length: a forged or malformed message)."""
    if not is_key(proof) or not key:
        return False
    try:
        expected = prove(key, purpose, document)
    except (TypeError, ValueError):  # not JSON (a NaN...): nothing a proof was made of
        return False
    return hmac.compare_digest(proof, expected)


def without_proof(body) -> dict:
    return {name: value for name, value in body.items() if name != "proof"}
