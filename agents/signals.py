"""The agents app's receivers of Django's and the engine's signals, connected in ``AgentsConfig.ready``."""

from agents import warnings
from workflows_app.engine import reports
from workflows_app.models import Operation
from workflows_app.states import OperationState


def lose_started_operations(sender, instance, **kwargs):
    """``pre_delete`` of an :class:`~agents.models.Agent`: its started operations are lost first,
    the retryable failure of an agent gone offline. The offline sweep only judges
    agents that have a row, so a row deleted first — by the admin, a queryset's ``delete()``, the
    shell — would leave them ``started`` for ever. It runs inside the delete's transaction: the
    operations are recorded lost together with the row's deletion, or not at all."""
    for operation in Operation.objects.filter(agent=instance.name, state=OperationState.STARTED):
        reports.record_lost(operation, operation.attempt, f"agent {instance.name} was deleted")


def warn_of_unknown_agents(sender, execution_id, **kwargs):
    """``execution_warnings``: the execution's steps that wait for an agent that is not there."""
    return warnings.unknown_agents(execution_id)
