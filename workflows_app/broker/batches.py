"""Taking a queue's messages on Redis in batches: one round trip for many, and none lost.

kombu's Redis transport hands a consumer one message a round trip (BRPOP), records it in its
``unacked`` bookkeeping with a second and forgets it with a third when it is acknowledged. The
BRPOP removes the message from the queue as it hands it over, so a consumer killed before the
second round trip takes the message with it: a manager's inbox killed so lost an agent's claim
or outcome.

Here one script moves up to N messages from the queue into kombu's own bookkeeping (the
``unacked`` hash and its index, each under a delivery tag of its own) and returns them, in one
step of the server: a message is always either in the queue or recorded as held. What a consumer
took and never acknowledged is then given back as kombu gives back any message held (its
visibility timeout, ``workflows_app.broker.give_back_held``). A batch is acknowledged (or given
back) with one pipeline.

Waiting for a message when the queue is empty is one blocking move of the first one that comes
into the queue's ``<queue>.taking`` list, which every take empties first: a consumer killed
between the two leaves it there for the next take of any consumer.

A message longer than ``max_bytes``, or that is not a JSON object (anyone who may push onto
the list may push anything), is dropped as it is taken and returned without its body: the
consumer logs it as refused, unread. Only what kombu could give back is recorded as held.
"""

import json
import time
import uuid
from dataclasses import dataclass

#: KEYS: the queue, its ``.taking`` list, kombu's ``unacked`` hash and its index.
#: ARGV: how many at most, the time, the batch's tag prefix, the longest body returned, the
#: routing key recorded (the queue's name: what ``give_back_held`` and kombu's restore read).
_TAKE = """
local taken = {}
local n = tonumber(ARGV[1])
local longest = tonumber(ARGV[4])
local route = ',"",' .. cjson.encode(ARGV[5]) .. ']'
for _, source in ipairs({KEYS[2], KEYS[1]}) do
  while #taken < 3 * n do
    local raw = redis.call('RPOP', source)
    if not raw then break end
    local tag = ARGV[3] .. '.' .. (#taken / 3 + 1)
    local size = string.len(raw)
    if size > longest then
      raw = ''  -- refused unread: dropped
    else
      local ok, envelope = pcall(cjson.decode, raw)
      if ok and type(envelope) == 'table' then
        redis.call('HSET', KEYS[3], tag, '[' .. raw .. route)
        redis.call('ZADD', KEYS[4], ARGV[2], tag)
      else
        raw = ''  -- not kombu's (anyone may push onto the list): dropped
      end
    end
    table.insert(taken, tag); table.insert(taken, raw); table.insert(taken, size)
  end
end
return taken
"""


@dataclass
class Taken:
    """A message taken: its delivery tag, its kombu envelope (None when it was dropped: longer than
    the take's ``max_bytes``, or not a JSON object) and its length in bytes."""

    tag: str
    envelope: dict | None
    size: int


class Batches:
    """A Redis queue's messages, taken and acknowledged in batches, on ``channel`` (a kombu Redis
    channel: its client, its ``unacked`` keys). Only for a queue of priority 0 with no global key
    prefix (:func:`usable`)."""

    def __init__(self, channel, queue):
        self.channel, self.queue = channel, queue
        self.client = channel.client
        self.taking = f"{queue}.taking"
        self.script = self.client.register_script(_TAKE)

    def take(self, most, max_bytes, timeout) -> list[Taken]:
        """Up to ``most`` messages, waiting at most ``timeout`` seconds for the first one."""
        taken = self._take(most, max_bytes)
        if taken or timeout <= 0:
            return taken
        if self.client.brpoplpush(self.queue, self.taking, timeout=timeout) is None:
            return []
        return self._take(most, max_bytes)

    def _take(self, most, max_bytes) -> list[Taken]:
        reply = self.script(keys=[self.queue, self.taking, self.channel.unacked_key, self.channel.unacked_index_key],
                            args=[most, time.time(), uuid.uuid4().hex, max_bytes, self.queue])
        taken = []
        for i in range(0, len(reply), 3):
            tag, raw, size = _text(reply[i]), reply[i + 1], int(reply[i + 2])
            taken.append(Taken(tag, _envelope(raw), size))
        return taken

    def ack(self, tags):
        """Forget the messages of ``tags``: handled (or refused), never given back."""
        if tags:
            with self.client.pipeline() as pipe:
                pipe.zrem(self.channel.unacked_index_key, *tags).hdel(self.channel.unacked_key, *tags).execute()

    def give_back(self, tags):
        """Put the messages of ``tags`` back in the queue, to be taken again (kombu's restore)."""
        for tag in tags:
            self.channel.qos.restore_by_tag(tag, leftmost=True)


def usable(channel) -> bool:
    """Whether a queue on ``channel`` can be taken in batches: a kombu Redis channel without a
    global key prefix (whose client would prefix only the script's first key)."""
    return hasattr(channel, "unacked_key") and hasattr(channel, "client") and not getattr(channel, "global_keyprefix", "")


def _envelope(raw):
    try:
        envelope = json.loads(raw) if raw else None
    except ValueError:  # not kombu's: anyone may push onto the list
        return None
    return envelope if isinstance(envelope, dict) else None


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
