"""The test suite's settings: the demo project's (``switchyard/settings.py``), read after each
pytest-xdist worker took a var directory and a broker namespace of its own (``tests/parallel.py``)."""

from tests import parallel

parallel.isolate()

from switchyard.settings import *  # noqa: E402,F403

# Django's default password hasher is slow on purpose (PBKDF2, a million rounds: about 0.45 s a
# hash on a CI core), and every test that makes a user with a password (admin_client's too) paid
# it: a fifth of the unit suite's time. The tests' users guard nothing; their hashes take one
# round and still check anywhere (tests/hashers.py).
PASSWORD_HASHERS = ["tests.hashers.OneRoundPBKDF2PasswordHasher"]

# WhiteNoise (the demo project's middleware) reads every static file's path and headers when a
# handler loads its middleware, and the test client loads them anew for each client: 20 % of
# the API tests' time. Told to look a file up when it is asked for instead (as it does with
# DEBUG on), it serves the same files; no test of this process asks for one.
WHITENOISE_AUTOREFRESH = True
