"""The agents' keys, as the managers and the web process know them (``workflows_app.wire.keys``
says how a key is made and what it proves).

An agent's key is derived from the master key and its name; rotating it (:func:`rotate`,
``manage.py agent_key NAME --rotate``) stores a new random salt for that name
(:class:`~workflows_app.models.SigningKey`), which changes its key and no other. The managers read
the salts at most every :data:`SALT_SECONDS`, so a rotation is in force everywhere within that.
"""

import secrets
import time

from workflows_app.models import SigningKey
from workflows_app.wire import keys

#: The prefix of a :class:`SigningKey` that holds the salt of a rotated agent's key.
ROTATED = "agent:"
#: How long a process keeps the salts it read.
SALT_SECONDS = 5.0
_salts = {}  # name -> (salt, when read)


def agent_keys(names) -> dict[str, str]:
    """The key of each agent of ``names`` (one query for the salts this process does not hold)."""
    names = set(names)
    now = time.monotonic()
    stale = [name for name in names if name not in _salts or now - _salts[name][1] > SALT_SECONDS]
    if stale:
        found = dict(SigningKey.objects.filter(name__in=[ROTATED + name for name in stale]).values_list("name", "key"))
        for name in stale:
            _salts[name] = (found.get(ROTATED + name, ""), now)
    return {name: keys.derive(name, _salts[name][0]) for name in names}


def agent_key(name) -> str:
    return agent_keys([name])[name]


def rotate(name) -> str:
    """Give agent ``name`` a new key (the old one proves nothing from now on); returns it."""
    SigningKey.objects.update_or_create(name=ROTATED + name, defaults={"key": secrets.token_hex(16)})
    _salts.pop(name, None)
    return agent_key(name)


def forget():
    """Read the salts again at the next use (a test that changed them behind this process' back)."""
    _salts.clear()
