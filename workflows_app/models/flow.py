"""What the rate limits of operations count: the attempts sent per key (``workflows_app.flow``)."""

from django.db import models


class RateSend(models.Model):
    """One attempt sent under a rate limit: its key and when. A window's count is the rows of its
    key since the window began; rows older than the key's period are deleted as it goes on."""

    id = models.BigAutoField(primary_key=True)
    key = models.CharField(max_length=255)
    sent_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["key", "sent_at"], name="rate_send_key_time")]

    def __str__(self):
        return f"{self.key} {self.sent_at.isoformat()}"
