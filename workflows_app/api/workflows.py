"""``POST /api/v1/workflows/{id}``: pause or unpause a workflow as a whole. It parses the action,
calls its service (``services.WORKFLOW_ACTIONS``) and translates the refusals here.

A workflow hidden from the user (one registered with a permission it lacks) or not registered is
not found (404); an action it may not take is 403; pausing a paused workflow, or unpausing one that
is not, is 409 ``invalid_transition``."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema_field
from rest_framework import generics, serializers
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from workflows_app import errors as domain
from workflows_app import permissions, services
from workflows_app.api import errors
from workflows_app.api.base import SwitchyardView
from workflows_app.api.schema import extend_schema
from workflows_app.api.schema import errors as error_responses
from workflows_app.api.serializers import StrictCharField, StrictSerializer
from workflows_app.models import PausedWorkflow

WORKFLOW_ACTIONS = ("pause", "unpause")
assert set(services.WORKFLOW_ACTIONS) == set(WORKFLOW_ACTIONS)


@extend_schema_field({"type": "string", "enum": list(WORKFLOW_ACTIONS)})
class WorkflowActionField(StrictCharField):
    """A string; one that is none of WORKFLOW_ACTIONS is answered ``unknown_action`` by the view."""

    document_no_nul = False


class WorkflowActionSerializer(StrictSerializer):
    """An action on a workflow as a whole."""

    action = WorkflowActionField(allow_blank=True, trim_whitespace=False,
                                 help_text="`pause` or `unpause`; another string is answered `unknown_action`")


class WorkflowStateSerializer(serializers.Serializer):
    """Whether a workflow is paused, after an action on it."""

    workflow_id = serializers.CharField()
    paused = serializers.BooleanField(help_text="its new executions wait `queued` and its schedules' slots are skipped")
    paused_at = serializers.DateTimeField(allow_null=True)
    paused_by = serializers.CharField(help_text="the user who paused it; empty for a command")
    started = serializers.IntegerField(allow_null=True, help_text=(
        "unpause: how many of its queued executions started (others wait for a slot of their concurrency key)"))


def workflow_state(workflow_id, started=None) -> dict:
    paused = PausedWorkflow.objects.filter(workflow_id=workflow_id).first()
    return {"workflow_id": workflow_id, "paused": paused is not None, "paused_at": paused and paused.paused_at,
            "paused_by": paused.paused_by if paused else "", "started": started}


class WorkflowDetail(SwitchyardView, generics.GenericAPIView):
    """Pause or unpause a workflow as a whole."""

    serializer_class = WorkflowActionSerializer
    filter_backends = ()

    @extend_schema(
        operation_id="workflows_act",
        summary="Pause or unpause a workflow as a whole",
        description="While a workflow is paused its new executions wait `queued` and its schedules' slots are "
                    "recorded `skipped`; its running executions go on (pause each with `POST executions/{id}`). "
                    "Unpause starts its queued executions in the order they were created. Needs "
                    "`workflows_app.change_execution` (and the workflow's own permission, if it has one).",
        parameters=[OpenApiParameter("id", OpenApiTypes.STR, OpenApiParameter.PATH, description="the workflow's name")],
        request=WorkflowActionSerializer,
        responses={200: WorkflowStateSerializer, **error_responses(
            400, 401, 403, 404, 409, 413, 415,
            e400="`parse_error`; `invalid_parameters` (a missing or non-string action); `unknown_action`",
            e404="`not_found`: no such workflow, or one hidden from the user",
            e409="`invalid_transition`: pause of a paused workflow, unpause of one that is not paused")},
    )
    def post(self, request, *args, **kwargs):
        workflow_id = kwargs["id"]
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        action = serializer.validated_data["action"]
        if action not in services.WORKFLOW_ACTIONS:
            raise errors.UnknownAction(f"unknown action {action[:100]!r}: one of {', '.join(WORKFLOW_ACTIONS)}")
        if workflow_id in permissions.hidden_workflows(request.user):
            raise NotFound(f"no workflow {workflow_id[:200]!r}")
        try:
            done = services.WORKFLOW_ACTIONS[action](workflow_id, user=request.user)
        except domain.RegistrationError:
            raise NotFound(f"no workflow {workflow_id[:200]!r}") from None
        except domain.TransitionRefused as exc:
            raise errors.InvalidTransition(str(exc)) from None
        return Response(workflow_state(workflow_id, started=done if action == "unpause" else None))
