"""Who may do what. Every endpoint needs a logged-in user (``IsAuthenticated``, the default in
``REST_FRAMEWORK``); the actions that do not wait for the workflow — kill, force-cancel,
force-resume — also need ``workflows_app.force_execution`` (as in the admin)."""

from rest_framework.permissions import BasePermission

FORCE_PERMISSION = "workflows_app.force_execution"
#: The actions on an execution that need FORCE_PERMISSION (SPEC §8).
FORCE_ACTIONS = frozenset({"kill", "force-cancel", "force-resume"})


class CanForceExecution(BasePermission):
    """The user may kill, force-cancel and force-resume executions."""

    message = f"kill, force-cancel and force-resume need the permission {FORCE_PERMISSION}"

    def has_permission(self, request, view):
        return bool(request.user and request.user.has_perm(FORCE_PERMISSION))
