"""Which tests are ``pure``: what they touch, no set-up changes.

CI runs the suite on several set-ups (PostgreSQL + Redis, SQLite + the embedded Redis,
PostgreSQL + RabbitMQ). A test that reaches neither a database, a broker nor a process of its
own computes the same thing on every one of them, so the first set-up runs it and the others
leave it out (``-m "not pure"``). Nobody marks a test ``pure`` by hand: :func:`classify` does, from
what the test asks for —

* the database: pytest-django's ``django_db`` marker, or any fixture that reaches ``db`` or
  ``transactional_db`` (``admin_client``, ``make_execution``, ``stack``…);
* real processes or services: the ``integration`` marker;
* processes of its own (a command, a build): the ``processes`` marker;

and :func:`hold` holds a pure test to it while it runs: pytest-django refuses it the database,
and a connection to any server or a process it starts fails the test with what to mark it. A test
that forgot its marker so fails in the set-up that runs it, rather than passing there and being
left out of the set-ups whose outcome it depends on.
"""

import socket
import subprocess

import pytest

#: Reached by every fixture of pytest-django that gives a test the database.
DATABASE_FIXTURE = "_django_db_helper"
#: A test with any of these markers touches what a set-up changes.
TOUCHING_MARKERS = ("django_db", "integration", "processes")


def touches_the_set_up(item) -> bool:
    return DATABASE_FIXTURE in getattr(item, "fixturenames", ()) or any(
        item.get_closest_marker(name) for name in TOUCHING_MARKERS)


def classify(items) -> None:
    """Mark ``pure`` every collected test that touches nothing a set-up changes."""
    for item in items:
        if not touches_the_set_up(item):
            item.add_marker(pytest.mark.pure)


def hold(item, monkeypatch) -> None:
    """While the pure test ``item`` runs, refuse it connections and processes."""
    if item.get_closest_marker("pure") is None:
        return

    def refuse(what, marker):
        def refused(*args, **kwargs):
            pytest.fail(f"{item.nodeid} touches nothing a set-up changes (it is `pure`), but it {what}: "
                        f"mark it {marker} (tests/pure.py)", pytrace=False)
        return refused

    connects = refuse("connects to a server", "`integration` or give it the database")
    monkeypatch.setattr(socket.socket, "connect", connects)
    monkeypatch.setattr(socket.socket, "connect_ex", connects)
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("starts a process", "`processes`"))
