"""Django signals of the engine.

``execution_status_changed`` is sent after every committed execution transition, with
``execution`` (the row as written), ``source`` and ``target`` (``ExecutionStatus`` members)
and ``event`` (the stored ``Event``). A receiver that raises changes nothing: the failure is
recorded as a ``listener_failed`` event.

``execution_warnings`` is sent by ``queries.warnings`` with ``execution_id``: each receiver
returns a list of warnings of that execution, ``{"code", "step", "message"}`` each (``code`` a
``WarningCode``). It lets what the engine does not know add to them: the agents' registry says
which steps wait for an agent that never came (``agents.warnings``).
"""

from django.dispatch import Signal

execution_status_changed = Signal()
execution_warnings = Signal()
