"""No input, however malformed, causes a 500: a seeded random run of odd bodies, query
strings and ids against every endpoint. Every response is also checked against the schema
(``CheckedClient``), so what it answers is what the schema says it may answer."""

import json
import random
import string
import uuid

import pytest

from tests.api.conftest import API
from workflows_app.states import ExecutionStatus, OperationState

ODD_STRINGS = ["", " ", "\x00", "a\x00b", "\ud800", "é", "😀", "-", ",", ",,", "--created_at", "created_at,",
               "null", "true", "1e999", "NaN", "-1", "0", "9" * 40, "x" * 5000, "%00", "../..", "<script>",
               "2030-01-01", "2030-01-01T00:00:00", "2030-01-01T00:00:00+99:00", "9999-12-31T23:59:59-23:59",
               str(uuid.uuid4()), "demo", "cancel", "kill", "completed", "log"]
FIELDS = ["workflow_id", "parameters", "deployment_id", "failure_mode", "timeout", "wait_after_fail", "dry_run",
          "queue", "force", "action", "name", "payload"]
QUERY = ["status", "workflow_id", "deployment_id", "created_after", "created_before", "ordering", "limit", "offset",
         "after", "type", "execution_id", "lang"]


def odd_value(rng, depth=0):
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return rng.choice(ODD_STRINGS)
    if kind == 1:
        return rng.choice([0, -1, 1, 2**31, 2**63, 2**64, -(2**70), 10**300])
    if kind == 2:
        return rng.choice([0.5, -0.0, 1e308, -1e-308, 3.14])
    if kind == 3:
        return rng.choice([True, False, None])
    if kind == 4:
        return "".join(rng.choice(string.printable) for _ in range(rng.randrange(20)))
    if kind == 5:
        return rng.choice(["cancel", "force-cancel", "kill", "resume", "force-resume", "demo", "fail_fast"])
    if kind == 6:
        return [odd_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(ODD_STRINGS + FIELDS): odd_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def odd_body(rng):
    if rng.random() < 0.2:
        return odd_value(rng)
    return {rng.choice(FIELDS): odd_value(rng) for _ in range(rng.randrange(1, 5))}


@pytest.fixture
def targets(make_execution, make_operation):
    running = make_execution(status=ExecutionStatus.STARTED, deployment_id="demo")
    make_operation(OperationState.STARTED, running)
    ended = make_execution(status=ExecutionStatus.FAILED)
    return [str(running.pk), str(ended.pk), str(uuid.uuid4()), "not-a-uuid", "%00", "%ED%A0%80", "é"]


@pytest.mark.parametrize("seed", range(4))
def test_odd_bodies_queries_and_ids_never_cause_a_500(force_api, targets, seed):
    rng = random.Random(seed)
    for _ in range(60):
        execution_id = rng.choice(targets)
        path = rng.choice(["/executions", f"/executions/{execution_id}", f"/executions/{execution_id}/events"])
        body = json.dumps(odd_body(rng), ensure_ascii=rng.random() < 0.5).encode("utf-8", "surrogatepass")
        response = force_api.generic("POST", API + path, body, content_type="application/json")
        assert response.status_code < 500, (path, body[:300], response.content[:300])

        path = rng.choice(["/workflows", "/executions", f"/executions/{execution_id}", "/events", "/agents",
                           f"/executions/{execution_id}/operations", f"/executions/{execution_id}/graph", "/schema"])
        # (A query string is bytes: a lone surrogate cannot be sent; "%ED%A0%80" among the ids is its try.)
        query = {rng.choice(QUERY): str(odd_value(rng)).encode("utf-8", "replace").decode()
                 for _ in range(rng.randrange(1, 4))}
        response = force_api.get(API + path, query)
        assert response.status_code < 500, (path, query, response.content[:300])
