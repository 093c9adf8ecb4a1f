"""The test suite's password hasher: Django's own PBKDF2, one round.

Django's default (a million rounds, about 0.45 s a hash on a CI core) is slow on purpose, and every
test that makes a user with a password paid it. A hash made here is an ordinary
``pbkdf2_sha256`` hash that says it took one round, so the processes a test starts (the demo
project's settings, Django's default hashers) check it as they check any: a browser test logs
in to their web server with the password of a user the test made."""

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class OneRoundPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1
