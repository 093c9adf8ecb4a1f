"""A starting manager carries on what earlier managers left (``agents.worker.manager.carry_on``).
A broker that fails while it sends again what was in flight — Redis restarting at that moment;
kombu may then fail a publish with an error of its own — does not end the manager: the tick's
watch of the broker sends it all again once the broker is back. Seen in a soak: a manager started
during a Redis restart exited with kombu's ``AttributeError``."""

import logging

import pytest

from agents.worker import manager
from workflows_app import outages
from workflows_app.engine import recovery

pytestmark = pytest.mark.django_db


def test_a_broker_failure_while_sending_again_what_was_in_flight_leaves_the_manager_starting(monkeypatch, caplog):
    def broker_gone():
        raise AttributeError("'NoneType' object has no attribute 'client'")

    monkeypatch.setattr(recovery, "resend_in_flight", broker_gone)
    with caplog.at_level(logging.INFO, logger=manager.logger.name):
        manager.carry_on()
    assert "could not send again what was in flight" in caplog.text
    assert "carried on 0 execution(s); 0 operation message(s) sent again" in caplog.text


def test_an_unreachable_database_is_still_ridden_out_by_the_start(monkeypatch):
    class Outage(Exception):
        pass

    def database_gone():
        raise Outage("connection refused")

    monkeypatch.setattr(recovery, "resend_in_flight", database_gone)
    monkeypatch.setattr(outages, "is_outage", lambda exc: isinstance(exc, Outage))
    with pytest.raises(Outage):
        manager.carry_on()
