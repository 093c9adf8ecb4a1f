"""The endpoints of ``/api/v1/``. Each parses its input, calls one service and
translates the service's errors into API errors (``workflows_app.api.errors``). Each derives from
``SwitchyardView`` first, which carries the API's configuration. ``GET agents`` is the
agents app's (``agents.api``), registered in ``workflows_app.api.routes``.

Lists run a constant number of queries however many rows they show: a count and a page, plus
one for the operations' dependencies (prefetched) and one to check the execution exists.

Who may do what (``workflows_app.permissions``): every read needs ``view``
(``workflows_app.api.permissions``), and shows only what the user may view — an execution of a
workflow whose own permission the user lacks is not found, nor listed, nor are its events (nor
can it be rerun: ``rerun_of`` naming it is answered as naming none); the writes pass the user to
their service, which refuses (403) what it may not do. A write answers the document it wrote
only to a user who may view it, an acknowledgement to another
(``workflows_app.api.permissions.withhold_document``).
"""

import json
import uuid

from django.db import transaction
from django.db.models import Prefetch
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import generics, status
from rest_framework.exceptions import NotFound
from rest_framework.permissions import SAFE_METHODS
from rest_framework.response import Response
from rest_framework.views import APIView

from workflows_app import errors as domain
from workflows_app import permissions, queries, services
from workflows_app.api import errors
from workflows_app.api.base import SwitchyardView
from workflows_app.bulk import run as bulk_run
from workflows_app.bulk import selection as bulk_selection
from workflows_app.api.filters import EventFilter, ExecutionFilter
from workflows_app.api.schema import EXECUTION_ID, EXECUTION_ORDERING_PARAMETER, READ_ERRORS, extend_schema
from workflows_app.api.schema import errors as error_responses
from workflows_app.api.serializers import (
    ACTIONS,
    LIST_OMITS,
    NO_OPERATIONS,
    ActionSerializer,
    BulkActionSerializer,
    BulkOutcomeSerializer,
    EventSerializer,
    ExternalEventSerializer,
    ExecutionDetailSerializer,
    ExecutionListItemSerializer,
    GraphSerializer,
    execution_detail,
    OperationSerializer,
    StartExecutionSerializer,
    WorkflowSerializer,
)
from workflows_app.conf import workflows_settings
from workflows_app.flow import idempotency
from workflows_app.models import Event, Execution, Operation, PausedWorkflow
from workflows_app.registry import workflows

assert set(services.ACTIONS) == set(ACTIONS)

#: The request header of a start's idempotency key, and the response header of a replay.
KEY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
IDEMPOTENCY_KEY = OpenApiParameter(
    KEY_HEADER, {"type": "string", "minLength": 1, "maxLength": idempotency.MAX_KEY}, OpenApiParameter.HEADER,
    description="a key of the client's for this start (at most 255 characters, no control character): the same "
                "request sent again with it answers the execution the first one started (200, with "
                f"{REPLAYED_HEADER}: true) instead of starting another")
IDEMPOTENT_REPLAYED = OpenApiParameter(
    REPLAYED_HEADER, {"type": "string", "enum": ["true"]}, OpenApiParameter.HEADER, response=[200],
    description="the execution was started by an earlier request with the same idempotency key")
REPLAY = OpenApiResponse(ExecutionDetailSerializer, description=(
    "a replay: the same request was sent before with the same idempotency key and started this execution, shown as "
    "it is now; nothing was started (the header Idempotent-Replayed is true)"))


class WorkflowList(SwitchyardView, generics.ListAPIView):
    """The registered workflows the user may see (not those whose own permission it lacks), by name."""

    serializer_class = WorkflowSerializer
    filter_backends = ()

    def get_queryset(self):
        hidden = set(permissions.hidden_workflows(self.request.user))
        limits = queries.operation_limits()
        if getattr(self, "swagger_fake_view", False):
            return []  # drf-spectacular building the schema: no query
        paused = set(PausedWorkflow.objects.values_list("workflow_id", flat=True))
        return [
            {"name": name, "parameters": [{**p, "default": _json_safe(p["default"])} for p in definition.parameters()],
             "schema": definition.schema, "failure_mode": definition.failure_mode or workflows_settings.FAILURE_MODE, "timeout": definition.timeout,
             "concurrency": definition.concurrency, "concurrency_key": definition.concurrency_key,
             "operation_limits": limits, "paused": name in paused}
            for name, definition in sorted(workflows().items()) if name not in hidden
        ]

    @extend_schema(operation_id="workflows_list", summary="List the registered workflows",
                   responses={200: WorkflowSerializer(many=True), **error_responses(*READ_ERRORS)})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class ExecutionLookupMixin:
    """The execution named by the URL's ``id``; 404 for an id that is not a UUID or no execution the
    user may find: for a read, one it may view; for a write, one not of a workflow hidden from it
    (whether it may act, its service says, naming the permission it lacks)."""

    def get_execution(self, queryset=Execution.objects) -> Execution:
        raw = self.kwargs["id"]
        try:
            pk = uuid.UUID(raw)
        except ValueError:
            raise NotFound(f"no execution {raw[:100]!r}: not a UUID") from None
        user = self.request.user
        if self.request.method in SAFE_METHODS:
            queryset = permissions.visible(user, queryset)
        else:
            queryset = queryset.exclude(workflow_id__in=permissions.hidden_workflows(user))
        try:
            return queryset.get(pk=pk)
        except Execution.DoesNotExist:
            raise NotFound(f"no execution {pk}") from None


class ExecutionListCreate(SwitchyardView, generics.ListAPIView):
    """Executions, newest first; start one."""

    queryset = Execution.objects.defer(*LIST_OMITS)  # not shown in a list: not read either
    serializer_class = ExecutionListItemSerializer
    filterset_class = ExecutionFilter

    def get_queryset(self):
        return permissions.visible(self.request.user, super().get_queryset())

    def get_serializer_class(self):
        return StartExecutionSerializer if self.request.method == "POST" else ExecutionListItemSerializer

    @extend_schema(operation_id="executions_list", summary="List executions", parameters=[EXECUTION_ORDERING_PARAMETER],
                   responses={200: ExecutionListItemSerializer(many=True), **error_responses(*READ_ERRORS)})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        operation_id="executions_create", summary="Start an execution",
        parameters=[IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED],
        description="Creates the execution (`pending`, or `queued` behind the deployment's active execution "
                    "with `queue`) and sends it to a manager once committed. Needs the permission "
                    "`workflows_app.add_execution`, and the workflow's own if it was registered with one.\n\n"
                    "With `rerun_of` and `from_step`, runs that execution again from that step: a new execution "
                    "of its workflow, whose other steps that succeeded keep their stored results and do not run "
                    "again (`succeeded`, attempt 0), but `from_step` and every step that followed from it. "
                    "`parameters` and the other options default to the original's. Also needs "
                    "`workflows_app.view_execution` on the original: an original of a workflow hidden from the "
                    "user is answered as one that does not exist. `GET /executions?rerun_of=ID` lists the "
                    "reruns of an execution.\n\n"
                    "With an idempotency key (the header `Idempotency-Key`, or `idempotency_key` in the body), the "
                    "same request sent again with the same key within `WORKFLOWS['IDEMPOTENCY_SECONDS']` (a day by "
                    "default) starts nothing: it answers 200 with the execution the first one started, as "
                    "`GET /executions/{id}` shows it now, and the header `Idempotent-Replayed: true`. Another "
                    "request with that key is 409 `idempotency_conflict`. Two requests with one key at once start "
                    "one execution. A key is the user's own: another user's request with the same key is a "
                    "request of its own.",
        request=StartExecutionSerializer,
        responses={201: ExecutionDetailSerializer, 200: REPLAY, **error_responses(
            400, 401, 403, 409, 413, 415,
            e403="`permission_denied`: the user may not start this workflow, or a session request without "
                 "its CSRF token",
            e400="`parse_error`; `invalid_parameters` (wrong types, a missing workflow_id, missing or unknown "
                 "workflow parameters, a workflow parameter that does not fit its type in the workflow's schema: "
                 "the message names each, e.g. `parameter 'n': expected integer, got string \"three\"`); "
                 "`unknown_workflow`; `existing_running_execution` (the deployment has an active execution: ask "
                 "with queue or force); with `rerun_of`, `invalid_parameters` also for a `rerun_of` that names no "
                 "execution (or one of a workflow hidden from the user), a `from_step` it does not have, or a "
                 "`workflow_id` that is not its workflow; `invalid_parameters` for an idempotency key that is "
                 "empty, longer than 255 characters or has a control character, or a header and a body field "
                 "that give two different keys",
            e409="`idempotency_conflict`: the idempotency key was already used, within "
                 "WORKFLOWS['IDEMPOTENCY_SECONDS'], for another request; nothing was started")},
    )
    def post(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        options = {"deployment_id": data.get("deployment_id"), "failure_mode": data.get("failure_mode"),
                   "timeout": data.get("timeout"), "wait_after_fail": data.get("wait_after_fail"),
                   "dry_run": data["dry_run"], "queue": data["queue"], "force": data["force"], "user": request.user,
                   "idempotency_key": _idempotency_key(request, data.get("idempotency_key"))}
        try:
            if data.get("rerun_of") is not None:
                _find_original(request.user, data["rerun_of"])
                execution = services.rerun(data["rerun_of"], data["from_step"], data.get("parameters"),
                                           workflow_id=data.get("workflow_id"), **options)
            else:
                execution = services.start(data["workflow_id"], data.get("parameters"), **options)
        except Execution.DoesNotExist:
            raise errors.InvalidParameters(f"rerun_of: no execution {data['rerun_of']}") from None
        except domain.RegistrationError as exc:
            raise errors.UnknownWorkflow(str(exc)) from None
        except domain.ValueRefused:
            raise  # the exception handler's: 400, or 413 for a value too large
        except domain.ParameterError as exc:
            raise errors.InvalidParameters(str(exc)) from None
        except domain.ExistingRunningExecution as exc:
            raise errors.ExistingRunningExecution(str(exc)) from None
        except idempotency.IdempotencyConflict as exc:
            raise errors.IdempotencyConflict(str(exc)) from None
        location = request.build_absolute_uri(reverse("api:execution", kwargs={"id": execution.pk}))
        if execution.idempotent_replay:  # started by an earlier request with the key: as it is now
            return Response(execution_detail(execution), status=status.HTTP_200_OK,
                            headers={"Location": location, REPLAYED_HEADER: "true"})
        # Just created: it has no operations yet (as its status says, the answer shows it as stored).
        return Response(execution_detail(execution, NO_OPERATIONS), status=status.HTTP_201_CREATED,
                        headers={"Location": location})


class ExecutionDetail(SwitchyardView, ExecutionLookupMixin, generics.GenericAPIView):
    """One execution; act on it."""

    queryset = Execution.objects.all()
    serializer_class = ExecutionDetailSerializer
    filter_backends = ()

    def get_serializer_class(self):
        return ActionSerializer if self.request.method == "POST" else ExecutionDetailSerializer

    @extend_schema(operation_id="executions_retrieve", summary="Get an execution", parameters=[EXECUTION_ID],
                   responses={200: ExecutionDetailSerializer, **error_responses(401, 403, 404)})
    def get(self, request, *args, **kwargs):
        return Response(execution_detail(self.get_execution()))

    @extend_schema(
        operation_id="executions_act",
        summary="Act on an execution: cancel, force-cancel, kill, resume, force-resume, pause, unpause",
        description="cancel, resume, pause and unpause need the permission `workflows_app.change_execution`; kill, force-cancel "
                    "and force-resume `workflows_app.force_execution` as well; an execution of a workflow registered "
                    "with a permission needs that one too (without it, the execution is not found).",
        parameters=[EXECUTION_ID],
        request=ActionSerializer,
        responses={200: ExecutionDetailSerializer, **error_responses(
            400, 401, 403, 404, 409, 413, 415,
            e400="`parse_error`; `invalid_parameters` (a missing or non-string action); `unknown_action`",
            e403="`permission_denied`: the user may not take this action, or a session request without its "
                 "CSRF token",
            e409="`invalid_transition`: the execution's status does not allow the action; nothing changed")},
    )
    def post(self, request, *args, **kwargs):
        execution = self.get_execution()
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        action = serializer.validated_data["action"]
        if action not in services.ACTIONS:
            raise errors.UnknownAction(f"unknown action {action[:100]!r}: one of {', '.join(ACTIONS)}")
        try:
            services.ACTIONS[action](execution.pk, user=request.user)
        except Execution.DoesNotExist:
            raise NotFound(f"no execution {execution.pk}") from None
        except domain.TransitionRefused as exc:
            raise errors.InvalidTransition(str(exc)) from None
        return Response(execution_detail(self.get_execution()))


class ExecutionBulk(SwitchyardView, generics.GenericAPIView):
    """One action on every execution a filter selects (``workflows_app.bulk``): each through the
    action's service and permission check, as one at a time, and the answer counts them."""

    serializer_class = BulkActionSerializer
    filter_backends = ()
    queryset = Execution.objects.none()  # for the schema; the filter selects

    @classmethod
    def as_view(cls, **initkwargs):
        # Each execution's action commits on its own, as one at a time, even in a project whose
        # ATOMIC_REQUESTS would hold every row lock and message until the last one.
        return transaction.non_atomic_requests(super().as_view(**initkwargs))

    @extend_schema(
        operation_id="executions_bulk_create",
        summary="Act on every execution a filter selects",
        description="Takes `action` on each execution `filter` selects — the filters of `GET /executions`, all of "
                    "them met; at least one, or `\"all\": true` — through the same service and permission check "
                    "as `POST /executions/{id}`, each in its own transaction, and answers how many were done, "
                    "skipped (their status does not allow the action: nothing was asked of them) and refused "
                    "(why: `permission`, `status` — it changed meanwhile —, `gone`). With `dry_run`, counts "
                    "what would happen and does nothing. Executions of a workflow hidden from the user (its own "
                    "permission) are not selected. Needs the action's permission (403 for the whole request "
                    "without it); a user without `workflows_app.view_execution` gets an acknowledgement, not "
                    "the counts. A message broker that stops answering stops the request there: 503 "
                    "`broker_unavailable`, whose message counts what was done.",
        request=BulkActionSerializer,
        responses={200: BulkOutcomeSerializer, **error_responses(
            400, 401, 403, 413, 415,
            e400="`parse_error`; `invalid_parameters` (a missing or non-string action, a key that is not a field, "
                 "a filter that is none of those of GET /executions, a filter value that is not one of its "
                 "values or is empty, no filter without `\"all\": true`); `unknown_action`",
            e403="`permission_denied`: the user may not take this action (on any execution), or a session "
                 "request without its CSRF token")},
    )
    def post(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        action = data["action"]
        if action not in services.ACTIONS:
            raise errors.UnknownAction(f"unknown action {action[:100]!r}: one of {', '.join(services.ACTIONS)}")
        filters = {name: value for name, value in data["filter"].items() if name != "all"}
        hidden = permissions.hidden_workflows(request.user)
        base = Execution.objects.exclude(workflow_id__in=hidden) if hidden else Execution.objects.all()
        try:
            executions = bulk_selection.select(filters, everything=data["filter"]["all"], base=base)
        except bulk_selection.NoFilter:
            raise errors.InvalidParameters('filter: give at least one filter, or "all": true to act on every '
                                           "execution") from None
        except bulk_selection.SelectionRefused as exc:
            raise errors.InvalidParameters(exc.describe(lambda name: f"filter.{name}")) from None
        outcome = bulk_run.act(action, executions, user=request.user, dry_run=data["dry_run"])
        if outcome.stopped:
            raise errors.BrokerUnavailable(outcome.summary())
        return Response(outcome.as_dict())


class ExecutionOperations(SwitchyardView, ExecutionLookupMixin, generics.ListAPIView):
    """The operations of an execution, in the order they were created."""

    serializer_class = OperationSerializer
    filter_backends = ()
    page_bytes_fields = ("args", "kwargs", "result", "error")  # a page's bound in bytes (api.pagination)
    queryset = Operation.objects.none()  # for the schema; get_queryset is the execution's

    def get_queryset(self):
        return (Operation.objects.filter(execution_id=self.execution.pk)
                .prefetch_related(Prefetch("depends_on", queryset=Operation.objects.only("id", "name"))))

    @extend_schema(operation_id="executions_operations_list", summary="List the operations of an execution",
                   parameters=[EXECUTION_ID],
                   responses={200: OperationSerializer(many=True), **error_responses(400, 401, 403, 404)})
    def get(self, request, *args, **kwargs):
        self.execution = self.get_execution(Execution.objects.only("id"))
        return super().get(request, *args, **kwargs)


class ExecutionGraph(SwitchyardView, ExecutionLookupMixin, generics.GenericAPIView):
    """The execution's operations as a graph."""

    serializer_class = GraphSerializer
    filter_backends = ()
    queryset = Execution.objects.all()

    @extend_schema(operation_id="executions_graph_retrieve", summary="Get the graph of an execution's operations",
                   parameters=[EXECUTION_ID], responses={200: GraphSerializer, **error_responses(401, 403, 404)})
    def get(self, request, *args, **kwargs):
        execution = self.get_execution(Execution.objects.only("id"))
        return Response(GraphSerializer(queries.graph(execution.pk)).data)


class ExecutionEvents(SwitchyardView, ExecutionLookupMixin, generics.GenericAPIView):
    """Deliver an external event to an execution."""

    serializer_class = ExternalEventSerializer
    filter_backends = ()
    queryset = Execution.objects.all()

    @extend_schema(
        operation_id="executions_events_create", summary="Deliver an external event to an execution",
        description="Stores an `event_received` event with data `{\"name\", \"payload\"}` and wakes the execution. "
                    "Needs the permission `workflows_app.change_execution`.",
        parameters=[EXECUTION_ID],
        request=ExternalEventSerializer,
        responses={202: EventSerializer, **error_responses(
            400, 401, 403, 404, 409, 413, 415,
            e400="`parse_error`; `invalid_parameters` (no string `name`, a payload that cannot be stored)",
            e403="`permission_denied`: the user may not send events, or a session request without its CSRF token",
            e409="`execution_not_active`: the execution has ended")},
    )
    def post(self, request, *args, **kwargs):
        execution = self.get_execution(Execution.objects.only("id"))
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        name, payload = serializer.validated_data["name"], serializer.validated_data.get("payload")
        try:
            event = services.send_event(execution.pk, name, payload, user=request.user)
        except domain.ValueRefused:
            raise  # the exception handler's: 400, or 413 for a value too large
        except domain.ParameterError as exc:
            raise errors.InvalidParameters(str(exc)) from None
        except domain.ActionRefused as exc:  # the service's check: the execution has ended
            raise errors.ExecutionNotActive(str(exc)) from None
        return Response(EventSerializer(event).data, status=status.HTTP_202_ACCEPTED)


class EventList(SwitchyardView, generics.ListAPIView):
    """Events in id order (ascending): tail with ``after`` = the last id seen."""

    queryset = Event.objects.order_by("id")
    serializer_class = EventSerializer
    page_bytes_fields = ("message", "data")  # a page's bound in bytes (api.pagination)
    filterset_class = EventFilter

    def get_queryset(self):
        return permissions.visible_records(self.request.user, super().get_queryset())

    @extend_schema(operation_id="events_list", summary="List events, oldest first",
                   responses={200: EventSerializer(many=True), **error_responses(*READ_ERRORS)})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


@extend_schema(exclude=True)
class NotFoundView(SwitchyardView, APIView):
    """Any other path under /api/v1/: a JSON 404 (after authentication, like every endpoint)."""

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)
        raise NotFound(f"no endpoint {request.path[:200]}")


def _idempotency_key(request, in_body):
    """The start's idempotency key: the header ``Idempotency-Key`` or the body's
    ``idempotency_key`` (both: the same one), else None. Whether it can be a key, the start checks."""
    in_header = request.headers.get(KEY_HEADER)
    if in_header is not None and in_body is not None and in_header != in_body:
        raise errors.InvalidParameters(f"idempotency_key: the header {KEY_HEADER} and the body's idempotency_key "
                                       f"give two different keys: give one of them")
    return in_body if in_header is None else in_header


def _find_original(user, execution_id):
    """The execution a rerun names must be one ``user`` may view: without ``view_execution`` a 403
    that names the permission, not the execution; one of a workflow hidden from the user is
    answered as one that does not exist (as every other door answers it: not found), without
    saying it exists."""
    permissions.check(user, "view")
    if not permissions.visible(user, Execution.objects.filter(pk=execution_id)).exists():
        raise errors.InvalidParameters(f"rerun_of: no execution {execution_id}")


def _json_safe(value):
    """A parameter's default as JSON: itself when it is JSON, else its repr."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)
    return value
