"""Who may do what. Every endpoint needs a logged-in user (``IsAuthenticated``, every view's:
``workflows_app.api.base``); the actions that do not wait for the workflow — kill, force-cancel,
force-resume — also need ``workflows_app.force_execution`` (as in the admin)."""

from rest_framework.permissions import BasePermission

from workflows_app.services import FORCE_PERMISSION


class CanForceExecution(BasePermission):
    """The user may kill, force-cancel and force-resume executions."""

    message = f"kill, force-cancel and force-resume need the permission {FORCE_PERMISSION}"

    def has_permission(self, request, view):
        return bool(request.user and request.user.has_perm(FORCE_PERMISSION))
