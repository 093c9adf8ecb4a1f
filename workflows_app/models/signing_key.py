from django.db import models


class SigningKey(models.Model):
    """The salt of an agent's key once it was rotated (``workflows_app.signing``): named
    ``agent:<agent name>``. Agents never read it: an agent holds broker credentials and its key."""

    name = models.CharField(max_length=220, unique=True)
    key = models.CharField(max_length=128)

    class Meta:
        default_permissions = ()

    def __str__(self):
        return self.name
