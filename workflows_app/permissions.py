"""Who may do what: the one rule of the API, the admin and the services.

Django's permissions on ``Execution``:

=================  ===========================================================================
action             needs
=================  ===========================================================================
``view``           ``view_execution``: workflows, executions, operations, graphs, events, agents
``start``          ``add_execution``
``cancel``,        ``change_execution``
``resume``,
``pause``,
``unpause``,
``send_event``
``kill``,          ``change_execution`` and ``force_execution``
``force-cancel``,
``force-resume``
``delete``         ``delete_execution`` (an ended execution only)
=================  ===========================================================================

A schedule (``workflows_app.schedules``) needs what its executions need:

=================  ===========================================================================
action             needs
=================  ===========================================================================
``view``           ``view_execution``
``schedule``,      ``add_execution`` (what starting its workflow needs): create one, trigger it
``trigger``
``change``,        ``change_execution``
``pause``,
``resume``
``delete``         ``delete_execution``
=================  ===========================================================================

A workflow registered with ``@workflow(permission="app.codename")`` needs that permission as
well, for every action on its executions and its schedules, viewing them included. Superusers
have every permission (Django's ``has_perm``). ``user=None`` is the server's own access — what the
``manage.py`` commands and the engine act with — and is never refused.

Seeing what an action wrote is a ``view``: a user who may act but not view is answered that it
was done, not shown the execution or schedule (the API's ``withhold_document``).
"""

from workflows_app.errors import PermissionRefused, RegistrationError
from workflows_app.registry import get_workflow, workflows

VIEW = "workflows_app.view_execution"
START = "workflows_app.add_execution"
CHANGE = "workflows_app.change_execution"
FORCE = "workflows_app.force_execution"
DELETE = "workflows_app.delete_execution"

#: The permissions of each action, before the workflow's own.
REQUIRED = {
    "view": (VIEW,),
    "start": (START,),
    "cancel": (CHANGE,),
    "resume": (CHANGE,),
    "send_event": (CHANGE,),
    "kill": (CHANGE, FORCE),
    "force-cancel": (CHANGE, FORCE),
    "force-resume": (CHANGE, FORCE),
    "delete": (DELETE,),
    # A schedule's (workflows_app.schedules); view, resume and delete are the executions' own.
    "schedule": (START,),
    "trigger": (START,),
    "change": (CHANGE,),
    "pause": (CHANGE,),  # an execution's or a schedule's
    "unpause": (CHANGE,),
}
#: How a refusal names each action.
_VERBS = {"view": "view", "start": "start", "send_event": "send an event to"}


def workflow_permission(workflow_id) -> str | None:
    """The permission the workflow ``workflow_id`` adds, or None (also for a workflow that is no
    longer registered: its executions need only the execution's permissions)."""
    try:
        return get_workflow(workflow_id).permission
    except RegistrationError:
        return None


def missing(user, action, workflow_id=None) -> list[str]:
    """The permissions ``user`` lacks to take ``action`` (on an execution of ``workflow_id``)."""
    if user is None:
        return []
    needed = list(REQUIRED[action])
    extra = workflow_permission(workflow_id) if workflow_id is not None else None
    if extra:
        needed.append(extra)
    if not getattr(user, "is_active", False):
        return needed
    return [permission for permission in needed if not user.has_perm(permission)]


def allows(user, action, workflow_id=None) -> bool:
    """Whether ``user`` may take ``action`` (on an execution of ``workflow_id``)."""
    return not missing(user, action, workflow_id)


def check(user, action, workflow_id=None, target=""):
    """Raise ``PermissionRefused`` unless ``user`` may take ``action``. ``target``: what the
    refusal names (``execution <id>``, ``workflow 'install'``)."""
    lacking = missing(user, action, workflow_id)
    if lacking:
        raise PermissionRefused(user.get_username() if user is not None else "", _VERBS.get(action, action), lacking,
                                target)


def hidden_workflows(user) -> list[str]:
    """The registered workflows whose own permission ``user`` lacks: their executions, and what
    belongs to them, are not shown to that user."""
    if user is None:
        return []
    return sorted(name for name, definition in workflows().items()
                  if definition.permission and not user.has_perm(definition.permission))


def visible(user, queryset, *, workflow="workflow_id"):
    """What of ``queryset`` ``user`` may view (none without ``view_execution``): executions, or
    with ``workflow="execution__workflow_id"`` their operations or events (a join on the
    execution, not a subquery over every execution)."""
    if user is None:
        return queryset
    if not allows(user, "view"):
        return queryset.none()
    hidden = hidden_workflows(user)
    return queryset.exclude(**{f"{workflow}__in": hidden}) if hidden else queryset


def visible_records(user, records):
    """The operations or events of the executions ``user`` may view."""
    return visible(user, records, workflow="execution__workflow_id")
