"""Switchyard's pytest plugin (the ``pytest11`` entry point ``switchyard``): the ``switchyard``
fixture runs workflows inside a test, on the test's database (pytest-django's ``db``), with
their operations in the test's process and a clock of the test's own
(:class:`workflows_app.testing.harness.Harness`, also usable as a context manager outside pytest).

This module imports nothing of Django's at its top: pytest loads its plugins before
pytest-django has set Django up.
"""

import pytest


@pytest.fixture
def switchyard(db):
    """A :class:`~workflows_app.testing.harness.Harness`, entered for the test and left after it:
    ``run(workflow, parameters)`` to the end, ``start`` until it waits, ``send_event``,
    ``cancel``, ``advance`` (the test's clock) and ``fake`` (an operation's stand-in)."""
    # Imported here, not at the top: the harness needs the apps' models, which only exist once
    # pytest-django has set Django up (after the plugins are loaded).
    from workflows_app.testing.harness import Harness

    with Harness() as harness:
        yield harness
