"""Workflows with concurrency limits: for tests/engine/test_concurrency.py and
tests/integration/test_concurrency.py (``SWITCHYARD_WORKFLOW_MODULES=tests.workflows,tests.concurrency_workflows``).

The limit of ``cc_per_customer`` is read from :data:`LIMIT_ENV` when the module is imported (2
when unset): a manager started with another value runs with that limit, as a deploy of changed
code would. A test of this process changes it with :func:`register`.
"""

import os

from tests.workflows import step
from workflows_app.sdk import workflow

#: The environment variable that sets the limit of ``cc_per_customer`` in a process.
LIMIT_ENV = "SWITCHYARD_TEST_CONCURRENCY"


def per_customer(ctx, customer, agent="", seconds=0.0):
    """One step on ``agent`` that sleeps ``seconds`` (none without an agent): at most N at once per
    customer."""
    if agent:
        ctx.await_execute("work", step, f"cc-{customer}", sleep=seconds, agent=agent, max_retries=0)


def register(limit):
    """(Re-)register ``cc_per_customer`` with ``limit``: what a deploy of the code with that limit does."""
    return workflow(name="cc_per_customer", concurrency=limit, concurrency_key="customer")(per_customer)


cc_per_customer = register(int(os.environ.get(LIMIT_ENV, "2")))


@workflow(name="cc_whole", concurrency=2)
def whole(ctx, n=0):
    """At most 2 at once, whatever the parameters."""


@workflow(name="cc_per_deployment", concurrency=1, concurrency_key="deployment")
def per_deployment(ctx):
    """At most one at once per deployment, forced starts included."""


@workflow(name="cc_region_default", concurrency=1, concurrency_key="region")
def region_default(ctx, region="eu", size=1):
    """Keyed by a parameter with a default."""


@workflow(name="cc_free")
def free(ctx, n=0):
    """No limit: only its deployment holds it."""
