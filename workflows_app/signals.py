"""Django signals of the engine.

``execution_status_changed`` is sent after every committed execution transition, with
``execution`` (the row as written), ``source`` and ``target`` (``ExecutionStatus`` members)
and ``event`` (the stored ``Event``). A receiver that raises changes nothing: the failure is
recorded as a ``listener_failed`` event.
"""

from django.dispatch import Signal

execution_status_changed = Signal()
