"""A Switchyard worker where no result backend is configured (Switchyard needs none) does not warn
at every revoke that it could not write it to one — Celery's worker did, at each cancel, kill and
resume. A backend that is configured and fails is still warned of."""

import logging
from types import SimpleNamespace

import pytest
from celery import Celery
from celery.backends.base import DisabledBackend
from celery.worker import control, state

from agents.worker import pool


@pytest.fixture
def revokes(caplog):
    prepared = Celery("revokes", broker="memory://", set_as_current=False)
    pool.prepare(prepared)
    caplog.set_level(logging.WARNING, logger="celery.worker.control")
    yield caplog
    state.revoked.discard("op.1")


def revoke_on_a_worker_of(app):
    control._revoke(SimpleNamespace(app=app, consumer=None), ["op.1"])


class Missing(DisabledBackend):
    """No result backend, as every Celery in range meets it at a revoke: Celery 5.7 asks it for the
    task's state first, which it refuses (5.6 only writes, which it ignores)."""

    mark_as_revoked = DisabledBackend._is_disabled


@pytest.mark.parametrize("backend", [DisabledBackend, Missing])
def test_a_revoke_where_no_result_backend_is_configured_is_not_warned_of(revokes, backend):
    host = Celery("host", broker="memory://", set_as_current=False)
    revoke_on_a_worker_of(SimpleNamespace(backend=backend(app=host)))
    assert "op.1" in state.revoked, "Celery's own bookkeeping still happens"
    assert not [r for r in revokes.records if "revoked in backend" in r.getMessage()]


def test_a_result_backend_that_fails_to_mark_it_is_still_warned_of(revokes):
    asked = []

    class Failing:
        def get_state(self, task_id):  # Celery 5.7 asks first
            asked.append("get_state")
            raise ConnectionError("the result backend is down")

        def mark_as_revoked(self, *args, **kwargs):
            asked.append("mark_as_revoked")
            raise ConnectionError("the result backend is down")

    revoke_on_a_worker_of(SimpleNamespace(backend=Failing()))
    if not asked:
        pytest.skip("this Celery's worker writes no revoke to the result backend (5.5): nothing to warn of")
    assert [r.getMessage() for r in revokes.records] == [
        "Failed to mark task op.1 as revoked in backend: the result backend is down"]
