"""The secret of an operation's attempt: what proves that a report about it comes from the agent
the attempt was sent to.

Every operation message carries the secret of its attempt, an HMAC of the operation id, the
attempt and the agent under a key kept in the database (:class:`~workflows_app.models.SigningKey`,
made once, by whichever process needs it first). Managers and the web process read the key;
agents cannot (they hold broker credentials only), so an agent can repeat the secret of an attempt
it was sent, and make no other. Nothing is stored per attempt: a message sent again after a
restart carries the same secret.
"""

import functools
import hashlib
import hmac
import secrets

from django.db import IntegrityError, transaction

from workflows_app.models import SigningKey

KEY_NAME = "attempts"


@functools.cache
def _key() -> bytes:
    key = SigningKey.objects.filter(name=KEY_NAME).values_list("key", flat=True).first()
    if key is None:
        try:
            with transaction.atomic():
                key = SigningKey.objects.create(name=KEY_NAME, key=secrets.token_hex(32)).key
        except IntegrityError:  # another process made it first
            key = SigningKey.objects.get(name=KEY_NAME).key
    return key.encode()


def attempt_secret(operation_id, attempt, agent) -> str:
    """The secret of ``attempt`` of the operation, sent to ``agent``."""
    message = f"{operation_id}.{int(attempt)}.{agent}".encode()
    return hmac.new(_key(), message, hashlib.sha256).hexdigest()


def is_attempt_secret(secret, operation_id, attempt, agent) -> bool:
    """Whether ``secret`` is the one :func:`attempt_secret` made for these (in constant time)."""
    return isinstance(secret, str) and hmac.compare_digest(secret, attempt_secret(operation_id, attempt, agent))
