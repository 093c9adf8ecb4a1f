"""Who may do what, at the API's door: the rule is ``workflows_app.permissions``, the same as the
admin's and the services'.

Every endpoint needs a logged-in user, and every read the ``view`` permission (``ReadsNeedView``,
every view's: ``workflows_app.api.drf_settings``). What a write needs — ``start``, an action,
``send_event`` — the service it calls checks, for the user the view passes it; its
``PermissionRefused`` is a 403 ``permission_denied`` (``workflows_app.api.errors``), like this
class's.

What a write answers is a read: the document it created or changed (an execution, a schedule,
an event) is shown only to a user who may view it. A user who may act but not view (``change``
without ``view``) gets an acknowledgement instead (:func:`withhold_document`, every view's:
``SwitchyardView.finalize_response``): the write was done, as the rule lets it, and nothing of
the document is disclosed but the id of what it acted on."""

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.response import Response

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


def withhold_document(request, response):
    """``response`` as a write answers ``request``'s user: a successful write's body (2xx) only for
    a user who may ``view`` it (its workflow's own permission included), else
    :func:`acknowledgement`; a read, an error or an empty body as it is."""
    if (request.method in SAFE_METHODS or not isinstance(response, Response) or response.exception
            or not 200 <= response.status_code < 300 or response.data is None):
        return response
    data = response.data
    workflow_id = data.get("workflow_id") if isinstance(data, dict) else None
    lacking = permissions.missing(request.user, "view", workflow_id if isinstance(workflow_id, str) else None)
    if lacking:
        response.data = acknowledgement(data.get("id") if isinstance(data, dict) else None, lacking)
    return response


def acknowledgement(document_id, lacking) -> dict:
    """The answer of a write to a user who may not view what it wrote (schema component
    ``Acknowledgement``): the id of the execution, schedule or event it acted on or created."""
    return {"id": None if document_id is None else str(document_id),
            "message": f"done; the answer shows what was written only to a user who may view it "
                       f"(it needs the permission {', '.join(lacking)})"}
