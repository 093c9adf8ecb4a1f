"""Span ids chosen ahead of time: an execution's span id is chosen when the execution is created
and its span is recorded when it ends, in another process (the package's docstring says why).

OpenTelemetry's API has no way to give a span an id: the SDK's id generator makes them. So the
SDK of every process that may end an execution needs :class:`ExecutionIdGenerator` as its
``id_generator`` (``TracerProvider(id_generator=ExecutionIdGenerator())``): it hands out the ids
reserved by :func:`reserving`, for the one span started inside that block, and random ones (or
those of the generator it wraps) to every other span. A provider without it gives the execution
span an id of its own, and the attempts' spans point at a parent that never arrives
(``workflows_app.tracing.executions`` warns once per process).

This module imports nothing of OpenTelemetry: the generator only has the SDK's methods.
"""

import contextvars
import random
from contextlib import contextmanager

#: The ids reserved for the next span started in this context: ``[trace_id, span_id]``, each set
#: to None once taken.
_reserved = contextvars.ContextVar("switchyard_reserved_ids", default=None)


def random_trace_id() -> int:
    """A random 128-bit trace id (never 0, the invalid one)."""
    return random.getrandbits(128) or 1


def random_span_id() -> int:
    """A random 64-bit span id (never 0, the invalid one)."""
    return random.getrandbits(64) or 1


@contextmanager
def reserving(trace_id, span_id):
    """Inside the block, the next trace id and the next span id :class:`ExecutionIdGenerator`
    makes are these, once each. Start exactly one span inside it: the sampler or a span processor
    that starts a span of its own in between would take the span id instead (the caller checks
    the id its span got)."""
    token = _reserved.set([trace_id, span_id])
    try:
        yield
    finally:
        _reserved.reset(token)


def _take(index):
    ids = _reserved.get()
    if ids is None or ids[index] is None:
        return None
    value, ids[index] = ids[index], None
    return value


class ExecutionIdGenerator:
    """An id generator for the SDK's ``TracerProvider`` that honours :func:`reserving`.

    ``fallback``: another generator (such as one an exporter needs, with ids of its own format)
    for every id that is not reserved; by default random ones, as the SDK's own generator."""

    def __init__(self, fallback=None):
        self.fallback = fallback

    def generate_span_id(self) -> int:
        reserved = _take(1)
        if reserved is not None:
            return reserved
        return self.fallback.generate_span_id() if self.fallback is not None else random_span_id()

    def generate_trace_id(self) -> int:
        reserved = _take(0)
        if reserved is not None:
            return reserved
        return self.fallback.generate_trace_id() if self.fallback is not None else random_trace_id()

    def is_trace_id_random(self) -> bool:
        """Whether its trace ids are random (W3C's "random" flag): reserved ones are
        (:func:`random_trace_id`, or the parent's)."""
        if self.fallback is not None:
            return bool(getattr(self.fallback, "is_trace_id_random", lambda: False)())
        return True
