"""Without the ``[otel]`` extra nothing fails and nothing of OpenTelemetry is imported: a Python
process in which ``opentelemetry`` cannot be imported sets Django up, creates an execution,
builds an operation's message headers and runs an attempt — untraced, its log records carrying
the execution's id all the same."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import json, logging, os, sys, uuid
from types import SimpleNamespace

class Blocked:
    # Any import of opentelemetry (or one of its modules) fails, as when it is not installed.
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(f"No module named {name!r} (blocked)")
        return None

sys.meta_path.insert(0, Blocked())
os.environ["DJANGO_SETTINGS_MODULE"] = "switchyard.settings"
os.environ["OTEL_TRACES_EXPORTER"] = ""
import django
django.setup()

from workflows_app.models import Execution
from workflows_app.tracing import attempts, context, otel

records = []
logging.getLogger("probe").addHandler(type("H", (logging.Handler,), {"emit": lambda self, r: records.append(r)})())

def run(ctx, answer):
    logging.getLogger("probe").warning("inside")
    return {"outcome": "succeeded"}

ctx = SimpleNamespace(operation_id=uuid.uuid4(), execution_id=uuid.uuid4(), name="s", attempt=1, agent="a")
outcome = attempts.run(run, ctx, {"operation": "op"}, SimpleNamespace(switchyard_trace={"traceparent": "x"}))
print(json.dumps({
    "available": otel.available(),
    "trace_context": Execution(workflow_id="wf").trace_context,
    "headers": context.message_headers("00-" + "a" * 32 + "-" + "b" * 16 + "-01;", "wf"),
    "outcome": outcome,
    "execution_id": [r.execution_id for r in records] == [str(ctx.execution_id)],
    "imported": sorted(name for name in sys.modules if name.split(".")[0] == "opentelemetry"),
}))
"""


@pytest.mark.processes
def test_without_opentelemetry_nothing_fails_and_nothing_of_it_is_imported():
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "available": False, "trace_context": "", "headers": None, "outcome": {"outcome": "succeeded"},
        "execution_id": True, "imported": []}
