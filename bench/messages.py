"""How many messages a case sends through the broker, per unit of work: on Redis, from the
server's own command counts (``INFO commandstats``) across a measurement — every push onto a list
(a message into a queue: an operation's, a claim, an answer, a report, a Celery task, a result)
and every ``PUBLISH`` (Celery's task events, remote-control broadcasts, result notifications).
The counts are the whole server's: nothing else should use it during a measurement. On another
broker there is nothing to read (``None``)."""

from contextlib import contextmanager

#: Redis commands that put a message into a list, and those that publish one to subscribers.
PUSHES = ("lpush", "rpush", "lpushx", "rpushx", "lmove", "rpoplpush", "brpoplpush", "blmove")
PUBLISHES = ("publish", "spublish")


def _calls(client) -> dict:
    stats = client.info("commandstats")
    def calls(names):
        return sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in names)
    return {"pushed": calls(PUSHES), "published": calls(PUBLISHES)}


class Counter:
    """``with counter.measure(count): ...``: the messages pushed and published across the block, per
    unit of work (``count``), appended to ``counter.samples`` as ``{"pushed", "published"}``."""

    def __init__(self, client):
        self.client = client
        self.samples = []

    @contextmanager
    def measure(self, count):
        before = _calls(self.client)
        yield
        after = _calls(self.client)
        self.samples.append({kind: (after[kind] - before[kind]) / count for kind in before})


def redis_client(app):
    """The broker's Redis client of ``app``, or None when the broker is not Redis."""
    from workflows_app import broker

    if not broker.broker_is_redis():
        return None
    connection = app.connection_for_write()
    return connection.default_channel.client


__all__ = ["Counter", "redis_client"]
