"""Who may do what, at the API's door: the rule is ``workflows_app.permissions``, the same as the
admin's and the services'.

Every endpoint needs a logged-in user, and every read the ``view`` permission (``ReadsNeedView``,
every view's: ``workflows_app.api.drf_settings``). What a write needs — ``start``, an action,
``send_event`` — the service it calls checks, for the user the view passes it; its
``PermissionRefused`` is a 403 ``permission_denied`` (``workflows_app.api.errors``), like this
class's."""

from rest_framework.permissions import SAFE_METHODS, BasePermission

from workflows_app import permissions


class ReadsNeedView(BasePermission):
    """A logged-in user (else 401); for GET, HEAD and OPTIONS, one who may view executions."""

    def has_permission(self, request, view):
        user = request.user
        if not (user and user.is_authenticated):
            return False  # DRF answers 401 not_authenticated
        if request.method in SAFE_METHODS:
            permissions.check(user, "view")  # PermissionRefused: 403, naming the missing permission
        return True
