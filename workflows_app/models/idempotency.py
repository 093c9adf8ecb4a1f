from django.db import models

from workflows_app import clock


class IdempotencyKey(models.Model):
    """A start's idempotency key (``workflows_app.flow.idempotency``): the execution that the
    first start with this key of this owner started, and a fingerprint of what that start asked
    for. Unique per owner and key: the store that makes two starts with one key start one
    execution, however many processes take them at once.

    ``owner``: the user's pk as text, or ``""`` for the server's own starts (``user=None``: the
    commands, code). ``execution`` CASCADE: the key answers with its execution, and once that is
    deleted (purged, or deleted in the admin) the key has nothing left to answer — it goes too,
    never pointing at an id that no longer exists. Retention deletes executions without Django's
    collector, so it deletes their keys itself (``workflows_app.retention``)."""

    owner = models.CharField(max_length=255, blank=True)
    key = models.CharField(max_length=255)
    # sha256 (hex) of the canonical JSON of what defines the start.
    fingerprint = models.CharField(max_length=64)
    execution = models.ForeignKey("workflows_app.Execution", on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(default=clock.now, editable=False)  # the engine's clock (workflows_app.clock)
    # After this, the key answers nothing: a start with it starts anew (and replaces this row).
    expires_at = models.DateTimeField()

    class Meta:
        default_permissions = ()
        constraints = [models.UniqueConstraint(fields=["owner", "key"], name="idempotency_key_once")]
        # The purge's one DELETE of the expired keys (workflows_app.retention).
        indexes = [models.Index(fields=["expires_at"], name="idempotency_key_expiry")]

    def __str__(self):
        return f"{self.owner or '(server)'}:{self.key} -> {self.execution_id}"
