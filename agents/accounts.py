"""What an agent's own RabbitMQ account may do: use its own queues, publish reports, hear the
managers' broadcasts and answer them, send its task events — and nothing else.

RabbitMQ grants an account three regular expressions over the names of queues and exchanges
(``rabbitmqctl set_permissions``): *configure* (declare, delete), *write* (publish to an
exchange, bind a queue) and *read* (consume, get or purge a queue, bind to an exchange). A
declare, even of what exists as it is, needs *configure*, which also deletes: so an agent may
configure only what is its own, and what is shared — the exchanges of the reports, of Celery's
remote control and of its events — the managers declare, with the administrator's account, and
the agent declares passively, which needs no permission (``workflows_app.broker.shared``).

An agent ``NAME``, a Celery worker named ``NAME@<host>``, may:

* configure, write and read its own: its task queue ``NAME`` and the direct exchange of the same
  name it is bound to, its reply queues ``NAME.replies.<host>.<pid>`` (the answers to its
  claims) and its remote-control queue ``NAME@<host>.celery.pidbox``. Deleting one harms only
  itself;
* read ``celery.pidbox``: bind its remote-control queue to the broadcasts (kills, cancels, the
  questions a manager or Flower asks);
* write ``<management queue>.reporting``, the exchange its reports go to — never the reports
  queue, which holds every agent's reports; ``reply.celery.pidbox``, where its answers to a
  question go (the reply queue of whoever asked, which it cannot read); and ``celeryev``, its
  task and worker events, which Flower shows.

It may not configure (declare or delete) anything shared: those exchanges, the management queue,
the reports queue, another agent's queues; nor publish to the management queue, to another
agent's queue, to ``celery.pidbox`` (a kill or a cancel is the managers' to broadcast) or through
the default exchange; nor read any queue but its own, nor bind one to an exchange it may only
publish to (which would send it copies of what others are sent).
"""

import re

from workflows_app import wire

#: Celery's remote-control and events exchanges, by their default names (Celery's
#: ``control_exchange``, ``celery``, and ``event_exchange``): a project that renames them edits the
#: permissions printed. (Read from the project's Celery configuration, they would make a command
#: that only prints configure Celery, and with the embedded broker start it.)
BROADCASTS = "celery.pidbox"
REPLIES = "reply.celery.pidbox"
EVENTS = "celeryev"


def shared_exchanges() -> dict:
    """The exchanges every agent and manager shares: what each is for -> its name."""
    return {"reports": wire.reports_exchange(), "broadcasts": BROADCASTS, "replies": REPLIES, "events": EVENTS}


def permissions(agent) -> dict:
    """The ``configure``, ``write`` and ``read`` expressions of the account of ``agent``."""
    name = re.escape(agent)
    own = [name, rf"{re.escape(wire.reply_prefix(agent))}.+", rf"{name}@.+\.{re.escape(BROADCASTS)}"]
    shared = {use: re.escape(exchange) for use, exchange in shared_exchanges().items()}
    return {
        "configure": _any(own),
        "write": _any([*own, shared["reports"], shared["replies"], shared["events"]]),
        "read": _any([*own, shared["broadcasts"]]),
    }


def _any(patterns) -> str:
    return "^(" + "|".join(patterns) + ")$"
