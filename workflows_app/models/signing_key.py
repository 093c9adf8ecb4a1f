from django.db import models


class SigningKey(models.Model):
    """The key the managers sign each operation message's attempt with (``workflows_app.signing``).

    It lives in the database because agents have no access to it: an agent holds broker
    credentials only, so it cannot make the secret of an attempt that was not sent to it."""

    name = models.CharField(max_length=50, unique=True)
    key = models.CharField(max_length=128)

    class Meta:
        default_permissions = ()

    def __str__(self):
        return self.name
