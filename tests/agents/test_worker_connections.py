"""How a worker process keeps its database connection between Celery tasks (agents.worker.pool):
kept without a check between tasks that follow each other closely, checked after an idle spell,
dropped after a task when it failed or outlived CONN_MAX_AGE."""

import time

import pytest
from django.db import connection

from agents.worker import pool as worker


@pytest.fixture
def fresh(transactional_db):
    connection.ensure_connection()
    connection.health_check_done = True
    yield connection
    worker._last_task_end[0] = float("-inf")


def test_back_to_back_tasks_use_the_connection_without_a_check(fresh):
    raw = fresh.connection
    worker._drop_failed_connections()
    worker._check_idle_connections()
    assert fresh.connection is raw and fresh.health_check_done  # no SELECT 1 before the next query


def test_after_an_idle_spell_the_connection_is_checked_before_use(fresh):
    worker._drop_failed_connections()
    worker._last_task_end[0] = time.monotonic() - worker.IDLE_CHECK_SECONDS - 0.5
    worker._check_idle_connections()
    assert not fresh.health_check_done


def test_a_connection_that_raised_is_checked_after_its_task(fresh):
    fresh.errors_occurred = True
    worker._drop_failed_connections()
    assert not fresh.errors_occurred  # Django looked: usable, kept


def test_a_connection_past_its_max_age_is_closed_after_its_task(fresh):
    fresh.close_at = time.monotonic() - 1
    worker._drop_failed_connections()
    assert fresh.connection is None
