"""The endpoints of ``/api/v1/schedules``: list and create schedules; read, change, delete one;
pause, resume or trigger it. Each parses its input, calls one service (``workflows_app.schedules``)
and translates its refusals in one place (:func:`refusals`).

Who may do what is the executions' rule (``workflows_app.permissions``): a read needs ``view``
and shows only the schedules of workflows the user may see — one of a workflow whose own
permission it lacks is not found, nor listed —; a write passes the user to its service, which
refuses (403) what it may not do — changing what a schedule starts or when, and unpausing it,
need what starting its workflow needs — and (400) slots closer than
``WORKFLOWS["SCHEDULE_MIN_INTERVAL"]`` from a user who is not a superuser.
"""

from contextlib import contextmanager

from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import generics, status
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from workflows_app import errors as domain
from workflows_app import schedules
from workflows_app.api import errors
from workflows_app.api.base import SwitchyardView
from workflows_app.api.filters import ScheduleFilter
from workflows_app.api.schedule_serializers import (
    ACTIONS,
    CreateScheduleSerializer,
    ScheduleActionResultSerializer,
    ScheduleActionSerializer,
    ScheduleDetailSerializer,
    ScheduleSerializer,
    UpdateScheduleSerializer,
    action_result,
    schedule_detail,
)
from workflows_app.api.schema import READ_ERRORS, extend_schema
from workflows_app.api.schema import errors as error_responses
from workflows_app.models import Schedule, ScheduleSlot

assert set(schedules.ACTIONS) == set(ACTIONS)

SCHEDULE_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="the schedule's id")
E404 = "`not_found`: no such schedule (an id that is not a UUID too), or one of a workflow hidden from the user"
E400_FIELDS = ("`parse_error`; `invalid_parameters` (wrong types; a key that is not a field; parameters that do not "
               "fit the workflow; a cron expression that does not parse, an interval below 1 s, both or neither, "
               "an unknown time zone; slots closer than the server's minimum interval, "
               "`WORKFLOWS[\"SCHEDULE_MIN_INTERVAL\"]` (default 10 s; a superuser's are not held to it): the "
               "message names the field); `unknown_workflow`")
E403_CHANGE = ("`permission_denied`: a missing permission — `workflows_app.change_execution`, or, to change what the "
               "schedule starts or when, what starting its workflow needs (`workflows_app.add_execution`, and the "
               "workflow's own permission) —, or a session request without its CSRF token")


@contextmanager
def refusals(schedule_id=None):
    """The services' refusals as API errors: the one place this module translates them."""
    try:
        yield
    except Schedule.DoesNotExist:
        raise NotFound(f"no schedule {str(schedule_id)[:100]!r}") from None
    except domain.RegistrationError as exc:
        raise errors.UnknownWorkflow(str(exc)) from None
    except domain.ValueRefused:
        raise  # the exception handler's: 400, or 413 for a value too large
    except domain.ParameterError as exc:
        raise errors.InvalidParameters(str(exc)) from None


class ScheduleListCreate(SwitchyardView, generics.ListAPIView):
    """Schedules, newest first; create one."""

    queryset = Schedule.objects.defer("parameters")  # not shown in a list: not read either
    serializer_class = ScheduleSerializer
    filterset_class = ScheduleFilter

    def get_queryset(self):
        return schedules.visible(self.request.user, super().get_queryset()).order_by("-created_at", "id")

    def get_serializer_class(self):
        return CreateScheduleSerializer if self.request.method == "POST" else ScheduleSerializer

    @extend_schema(operation_id="schedules_list", summary="List schedules",
                   description="Newest first, without their parameters (a schedule's own page has them).",
                   responses={200: ScheduleSerializer(many=True), **error_responses(*READ_ERRORS)})
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        operation_id="schedules_create", summary="Create a schedule",
        description="Stores a schedule that starts executions of `workflow_id` with `parameters` on a cron "
                    "expression (`cron`, read in `timezone`) or every `interval` seconds: exactly one of the two. "
                    "The parameters are checked as a start checks them. Needs what starting the workflow needs: "
                    "`workflows_app.add_execution`, and the workflow's own permission if it was registered with one. "
                    "Unless the user is a superuser, two slots are at least `WORKFLOWS[\"SCHEDULE_MIN_INTERVAL\"]` "
                    "seconds apart (default 10): a shorter interval, or a cron expression with closer slots, is "
                    "refused 400.",
        request=CreateScheduleSerializer,
        responses={201: ScheduleDetailSerializer, **error_responses(
            400, 401, 403, 413, 415, e400=E400_FIELDS,
            e403="`permission_denied`: the user may not start this workflow, or a session request without its "
                 "CSRF token")},
    )
    def post(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        with refusals():
            schedule = schedules.create(**serializer.validated_data, user=request.user)
        return Response(schedule_detail(schedule), status=status.HTTP_201_CREATED,
                        headers={"Location": request.build_absolute_uri(
                            reverse("api:schedule", kwargs={"id": schedule.pk}))})


class ScheduleDetail(SwitchyardView, generics.GenericAPIView):
    """One schedule; change it, delete it, act on it."""

    queryset = Schedule.objects.all()
    serializer_class = ScheduleDetailSerializer
    filter_backends = ()

    def get_serializer_class(self):
        return {"POST": ScheduleActionSerializer, "PATCH": UpdateScheduleSerializer}.get(
            self.request.method, ScheduleDetailSerializer)

    @extend_schema(operation_id="schedules_retrieve", summary="Get a schedule", parameters=[SCHEDULE_ID],
                   description="With its parameters and its latest slots (missed runs included).",
                   responses={200: ScheduleDetailSerializer, **error_responses(401, 403, 404, e404=E404)})
    def get(self, request, *args, **kwargs):
        with refusals(kwargs["id"]):
            return Response(schedule_detail(schedules.get(kwargs["id"], user=request.user)))

    @extend_schema(
        operation_id="schedules_partial_update", summary="Change a schedule",
        description="Changes the fields given, checked as at creation (a change of the timing keeps the slots the "
                    "minimum interval apart). Giving `cron` clears `interval` and giving `interval` clears `cron`. A "
                    "change of the timing, the time zone or `paused` plans the next slot again from now. The "
                    "workflow cannot be changed. Needs `workflows_app.change_execution`; changing what the "
                    "schedule starts or when — `parameters`, `cron`, `interval`, `timezone`, or unpausing it "
                    "(`paused`: false) — needs what starting the workflow needs as well: "
                    "`workflows_app.add_execution`, and the workflow's own permission. A field given its current "
                    "value is no change.",
        parameters=[SCHEDULE_ID], request=UpdateScheduleSerializer,
        responses={200: ScheduleDetailSerializer, **error_responses(
            400, 401, 403, 404, 413, 415, e400=E400_FIELDS, e404=E404, e403=E403_CHANGE)},
    )
    def patch(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        with refusals(kwargs["id"]):
            schedule = schedules.update(kwargs["id"], **serializer.validated_data, user=request.user)
        return Response(schedule_detail(schedule))

    @extend_schema(
        operation_id="schedules_destroy", summary="Delete a schedule",
        description="Deletes the schedule and its slots; the executions it started stay (their `schedule` becomes "
                    "null). Needs `workflows_app.delete_execution`.",
        parameters=[SCHEDULE_ID],
        responses={204: None, **error_responses(401, 403, 404, e404=E404)},
    )
    def delete(self, request, *args, **kwargs):
        with refusals(kwargs["id"]):
            schedules.delete(kwargs["id"], user=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        operation_id="schedules_act", summary="Act on a schedule: pause, resume, trigger",
        description="pause: no slot fires until it is resumed. resume: slots fire again from the next one after "
                    "now. Both need `workflows_app.change_execution`; resuming a paused schedule needs what starting "
                    "the workflow needs as well. trigger: a run at once (paused or not), under "
                    "the overlap policy; `triggered` says what became of it (started, with its execution; "
                    "buffered; skipped, with the reason: the overlap policy, or a workflow that can no longer be "
                    "started with the schedule's parameters). It needs what starting the workflow needs.",
        parameters=[SCHEDULE_ID], request=ScheduleActionSerializer,
        responses={200: ScheduleActionResultSerializer, **error_responses(
            400, 401, 403, 404, 413, 415, e404=E404,
            e400="`parse_error`; `invalid_parameters` (a missing or non-string action); `unknown_action`")},
    )
    def post(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        action = serializer.validated_data["action"]
        if action not in schedules.ACTIONS:
            raise errors.UnknownAction(f"unknown action {action[:100]!r}: one of {', '.join(ACTIONS)}")
        with refusals(kwargs["id"]):
            done = schedules.ACTIONS[action](kwargs["id"], user=request.user)
            triggered = done if isinstance(done, ScheduleSlot) else None
            schedule = schedules.get(kwargs["id"]) if triggered is not None else done
        return Response(action_result(schedule, triggered))
