"""The test suite's settings: the demo project's (``switchyard/settings.py``), read after each
pytest-xdist worker took a var directory and a broker namespace of its own (``tests/parallel.py``)."""

from tests import parallel

parallel.isolate()

from switchyard.settings import *  # noqa: E402,F403
