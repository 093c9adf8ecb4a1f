"""What an agent's own RabbitMQ account may do: read its own queues, publish reports and its
workers' events, and nothing else of Switchyard's.

RabbitMQ grants an account three regular expressions over the names of queues and exchanges
(``rabbitmqctl set_permissions``): *configure* (declare, delete), *write* (publish to an
exchange, bind a queue) and *read* (consume from a queue, bind to an exchange). An agent ``NAME``,
a Celery worker named ``NAME@<host>``, needs:

* its task queue ``NAME`` and the direct exchange of the same name it is bound to;
* its reply queues ``NAME.replies.<host>.<pid>`` (the answers to its claims);
* the reports exchange (``<management queue>.reporting``), to publish to — never the reports
  queue, which holds every agent's reports;
* Celery's remote control (its own ``NAME@<host>.celery.pidbox`` queue bound to the
  ``celery.pidbox`` exchange, and the ``reply.celery.pidbox`` exchange its replies go to) and
  its task events (the ``celeryev`` exchange).

It may not publish to the management queue, to another agent's queue, to ``celery.pidbox`` (a
kill or a cancel is the managers' to broadcast), nor read any queue but its own.
"""

import re

from workflows_app import wire


def permissions(agent) -> dict:
    """The ``configure``, ``write`` and ``read`` expressions of the account of ``agent``."""
    name = re.escape(agent)
    own = [name, rf"{re.escape(wire.reply_prefix(agent))}.+", rf"{name}@.+\.celery\.pidbox"]
    reporting = re.escape(wire.reports_exchange())
    return {
        "configure": _any([*own, reporting, r"celery\.pidbox", r"reply\.celery\.pidbox", "celeryev"]),
        "write": _any([*own, reporting, r"reply\.celery\.pidbox", "celeryev"]),
        "read": _any([*own, r"celery\.pidbox"]),
    }


def _any(patterns) -> str:
    return "^(" + "|".join(patterns) + ")$"
