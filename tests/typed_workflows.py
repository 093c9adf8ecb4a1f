"""A workflow with typed parameters (``docs/writing-workflows.md``, "Typed parameters"), for the
tests of the one check of a start's parameters at every entry: the API, the admin, the command
and a parent's ``ctx.execute_workflow``.

Not registered when imported: :func:`register` registers it as ``typed`` for one test (the
registration is undone after it), and ``tests/workflows.py`` registers it as ``it_typed``.
"""

import dataclasses
from typing import Literal

from workflows_app import registry

NAME = "typed"


@dataclasses.dataclass
class Disk:
    size_gb: int
    kind: Literal["ssd", "hdd"] = "ssd"


def typed(ctx, n: int, size: Literal["small", "large"] = "small", ratio: float = 0.5, label: str = "vm",
          enabled: bool = True, tags: list[str] = (), disk: Disk | None = None, extra=None):
    """Its payload is what the function received, with the type of ``disk``."""
    ctx.set_payload({"n": n, "size": size, "ratio": ratio, "label": label, "enabled": enabled, "tags": list(tags),
                     "disk": disk and {"type": type(disk).__name__, **dataclasses.asdict(disk)}, "extra": extra})


def register(monkeypatch) -> str:
    """Register :func:`typed` as ``typed`` for one test; returns its name."""
    monkeypatch.setitem(registry._workflows, NAME, None)  # the registration is undone after the test
    registry.workflow(name=NAME)(typed)
    return NAME
