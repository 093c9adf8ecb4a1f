"""Django admin for executions: a list to find them, a page per execution to watch and
steer it — its summary, a picture of its graph, its operations, its latest events, the five
actions — and a form that starts one.

Nothing here changes a status or a state by itself: the actions and the start call the same
services as the API, and every refusal (``TransitionRefused``, ``PermissionRefused``, an execution
gone, a broker that does not answer) becomes a message on the page. Each page runs a constant
number of queries, however many operations the execution has.

Who may see and do what is ``workflows_app.permissions``' rule: the list and the pages show the
executions the user may view; the buttons, the list's actions and the start form offer only what
it may do, and the services refuse the rest.
"""

import functools

from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import DatabaseError
from django.http import HttpResponseNotAllowed, HttpResponseRedirect, JsonResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from kombu.exceptions import OperationalError as BrokerError

from workflows_app import permissions, queries, retention, services, task_runs
from workflows_app.admin import display, picture, timeline
from workflows_app.admin.forms import StartExecutionForm
from workflows_app.bulk import run as bulk_run
from workflows_app.errors import (
    ExistingRunningExecution,
    ParameterError,
    PermissionRefused,
    RegistrationError,
    TransitionRefused,
)
from workflows_app.flow import idempotency
from workflows_app.models import Event, Execution, Operation
from workflows_app.registry import workflows
from workflows_app.states import EventType, ExecutionStatus, OperationState

#: A graph of more boxes than this (a group of sibling steps counts as one) is summarised (per
#: operation and state), not drawn.
GRAPH_DRAW_LIMIT = picture.DRAW_LIMIT
OPERATIONS_PER_PAGE = 50
#: Reads of an execution's page of operations and of its counts, until the counts held still between
#: them (a busy execution's last read is shown as it is).
CONSISTENT_READS = 3
LATEST_EVENTS = 20
#: Stands for an execution's id in the change page's URL the graph's script fills in.
CHANGE_URL_ID = "00000000-0000-0000-0000-000000000000"
#: The children (and reruns) listed on an execution's page; the rest are a link away (the list, filtered).
CHILDREN_SHOWN = 50
#: The step names "Run again from step" suggests (any step's name may be typed).
RERUN_STEPS_OFFERED = 500
#: Seconds between two refreshes of the graph while the execution is active.
REFRESH_SECONDS = 2
#: The executions a delete's confirmation page names; the rest are counted.
DELETE_LISTED = 100
#: Up to this many executions checked, a list action says how each one went; past it, or on all
#: those the list matches, it says it once, in counts.
MESSAGES_PER_EXECUTION = 10

ACTION_LABELS = {"cancel": "Cancel", "force-cancel": "Force-cancel", "kill": "Kill", "resume": "Resume",
                 "force-resume": "Force-resume", "pause": "Pause", "unpause": "Unpause"}
ACTION_HELP = {
    "cancel": "stop starting operations, let the running ones finish, then end cancelled",
    "force-cancel": "end cancelled now, without waiting for the running operations",
    "kill": "SIGTERM then SIGKILL to the processes of every running operation, on every agent",
    "resume": "run the failed and cancelled operations again, with a new token",
    "force-resume": "as resume, and send the operations left in flight again",
    "pause": "send nothing new until it is unpaused; what runs goes on and its outcome is kept",
    "unpause": "carry on with the outcomes, events and timers that came meanwhile",
}


def take_action(modeladmin, request, action, execution_ids):
    """Take ``action`` on each execution through its service and say how each went: the one place
    the admin turns a refusal into a message."""
    for pk in execution_ids:
        try:
            execution = services.ACTIONS[action](pk, user=request.user)
        except Execution.DoesNotExist:
            modeladmin.message_user(request, f"{action}: execution {pk} no longer exists", messages.WARNING)
        except PermissionRefused as refused:
            modeladmin.message_user(request, f"{action} refused: {refused}", messages.ERROR)
        except TransitionRefused as refused:
            modeladmin.message_user(request, f"{action} refused: {refused}", messages.WARNING)
        except BrokerError as exc:
            modeladmin.message_user(request, f"{action} of {pk}: the message broker did not answer ({exc}); "
                                    "what was recorded is carried on when it does", messages.ERROR)
        except DatabaseError as exc:
            modeladmin.message_user(request, f"{action} of {pk} failed: the database refused it ({exc})", messages.ERROR)
        else:  # re-read: the service may have carried the action on to its end meanwhile
            status = Execution.objects.filter(pk=pk).values_list("status", flat=True).first() or execution.status
            modeladmin.message_user(request, f"{action}: execution {pk} is now {status}", messages.SUCCESS,
                                    extra_tags=said_tags(status))


def said_tags(status):
    """The tags of a message that ends with the execution's status: the page's live script (live.js)
    rewrites its end once the status has moved on, so that it never says "is pending" beside a
    page that shows "completed"."""
    return f"sy-said sy-said-{status}"


def take_bulk_action(modeladmin, request, action, executions):
    """Take ``action`` on every one of ``executions`` (a queryset) through ``workflows_app.bulk``
    — the same service and permission check as :func:`take_action`, a batch at a time — and say
    how it went in one message, in counts."""
    try:
        outcome = bulk_run.act(action, executions, user=request.user)
    except PermissionRefused as refused:
        modeladmin.message_user(request, f"{action} refused: {refused}", messages.ERROR)
    except DatabaseError as exc:
        modeladmin.message_user(request, f"{action} failed: the database refused it ({exc})", messages.ERROR)
    else:
        level = messages.ERROR if outcome.stopped else messages.WARNING if outcome.refused else messages.SUCCESS
        modeladmin.message_user(request, outcome.summary(), level)


def _bulk_action(action):
    """A list action for ``action``; the force ones show a confirmation page first. Up to
    MESSAGES_PER_EXECUTION executions checked, it says how each one went (:func:`take_action`);
    more, or all those matching the list's filters (Django's "select all"), and it says it once,
    in counts (:func:`take_bulk_action`)."""

    def run(modeladmin, request, queryset):
        across = _selected_across(request)
        if action in services.FORCE_ACTIONS and request.POST.get("confirmed") != "yes":
            if across:
                return modeladmin.confirm_page(request, action, request.POST.getlist("_selected_action"),
                                               matching=queryset)
            return modeladmin.confirm_page(request, action, list(queryset.values_list("pk", flat=True)))
        ids = [] if across else list(queryset.values_list("pk", flat=True)[:MESSAGES_PER_EXECUTION + 1])
        if across or len(ids) > MESSAGES_PER_EXECUTION:
            take_bulk_action(modeladmin, request, action, queryset)
        else:
            take_action(modeladmin, request, action, ids)
        return None

    run.__name__ = f"{_identifier(action)}_selected"
    return admin.action(description=f"{ACTION_LABELS[action]} the selected executions",
                        permissions=[_identifier(action)])(run)


def _selected_across(request) -> bool:
    """Whether the list's action is asked of all the executions its filters match (Django's
    "select all N", the action form's ``select_across``), not of the rows checked."""
    return str(request.POST.get("select_across", "")).lower() not in ("", "0", "false")


def _identifier(action):
    return action.replace("-", "_")


def _may(action):
    """``ExecutionAdmin.has_<action>_permission``: whether the user may take ``action`` (on the
    executions of workflows without a permission of their own; the service checks each one)."""

    def has_permission(self, request):
        return permissions.allows(request.user, action)

    has_permission.__name__ = f"has_{_identifier(action)}_permission"
    return has_permission


@admin.action(description="Delete the selected executions that have ended", permissions=["delete"])
def delete_ended(modeladmin, request, queryset):
    """Django's delete, with its confirmation page, of the ended ones with no active ancestor or
    descendant (``retention.deletable``); ExecutionAdmin counts and deletes them through
    ``retention`` (``get_deleted_objects``, ``delete_queryset``). An active execution is never deleted."""
    active = queryset.active().count()
    if active:
        modeladmin.message_user(request, f"{active} active execution(s) left alone: an execution is deleted only "
                                "once it has ended", messages.WARNING)
    ended = queryset.terminal()
    ids = retention.deletable(ended)
    tied = ended.count() - len(ids)
    if tied:
        modeladmin.message_user(request, f"{tied} ended execution(s) left alone: an active execution is above or "
                                "below them (a child goes with its parent, and never while that parent runs)",
                                messages.WARNING)
    return delete_selected(modeladmin, request, queryset.filter(pk__in=ids))


class WorkflowFilter(admin.SimpleListFilter):
    """By workflow: the registered ones (no query over the executions to find them)."""

    title = "workflow"
    parameter_name = "workflow_id"

    def lookups(self, request, model_admin):
        hidden = set(permissions.hidden_workflows(request.user))
        return [(name, name) for name in sorted(workflows()) if name not in hidden]

    def queryset(self, request, queryset):
        return queryset.filter(workflow_id=self.value()) if self.value() else queryset


class TaskFilter(admin.SimpleListFilter):
    """By Django task (the executions of the workflow ``django_task`` whose task is that one): the
    tasks this process loaded, as the workflows are the registered ones. Shown where there are."""

    title = "Django task"
    parameter_name = "task"

    def lookups(self, request, model_admin):
        if task_runs.TASK_WORKFLOW in set(permissions.hidden_workflows(request.user)):
            return []
        return [(path, path) for path in task_runs.known_tasks()]

    def queryset(self, request, queryset):
        return queryset.filter(workflow_id=task_runs.TASK_WORKFLOW, parameters__task=self.value()) \
            if self.value() else queryset


class ExecutionChangeList(ChangeList):
    """The list, with each row's count of operations per state read in one query for the page."""

    def get_results(self, request):
        super().get_results(request)
        rows = list(self.result_list)
        summaries = queries.operations_summaries([execution.pk for execution in rows])
        for execution in rows:
            execution.operations_summary = summaries[execution.pk]


@admin.register(Execution)
class ExecutionAdmin(admin.ModelAdmin):
    list_display = ["short_id", "status_badge", "workflow", "deployment_id", "created", "duration",
                    "operations"]
    list_display_links = ["short_id"]
    list_filter = ["status", WorkflowFilter, TaskFilter, "created_at"]
    search_fields = ["^id", "deployment_id", "=concurrency_key"]
    search_help_text = "an execution id (or its start), a deployment, a concurrency key, or a Django task's name"
    ordering = ["-created_at"]
    list_per_page = 50
    list_max_show_all = 1000
    actions = [delete_ended] + [_bulk_action(action) for action in services.ACTIONS]

    class Media:
        css = {"all": ["workflows_app/admin.css"]}

    # --- the list -----------------------------------------------------------------------------

    def get_changelist(self, request, **kwargs):
        return ExecutionChangeList

    def get_actions(self, request, action_location=None):
        # Django 6.1 asks for the actions of one place (action_location: the list's, the change
        # form's) and deprecates an override without the parameter; 5.2 and 6.0 have no places.
        places = {} if action_location is None else {"action_location": action_location}
        actions = super().get_actions(request, **places)
        actions.pop("delete_selected", None)  # delete_ended takes its place
        return actions

    @admin.display(description="execution", ordering="id")
    def short_id(self, execution):
        return str(execution.pk)[:8]

    @admin.display(description="status", ordering="status")
    def status_badge(self, execution):
        return display.badge(execution.status)

    @admin.display(description="workflow", ordering="workflow_id")
    def workflow(self, execution):
        """The workflow; for a Django task's execution, the task (its module path)."""
        task = task_runs.task_of(execution)
        return format_html('{} <span class="sy-task">{}</span>', execution.workflow_id, task) if task \
            else execution.workflow_id

    def get_search_results(self, request, queryset, search_term):
        """Also the executions of the Django task named ``search_term``: its module path, or the
        name of its function when one loaded task has it."""
        results, duplicates = super().get_search_results(request, queryset, search_term)
        tasks = task_runs.tasks_named(search_term.strip())
        if tasks:
            results = results | queryset.filter(workflow_id=task_runs.TASK_WORKFLOW, parameters__task__in=tasks)
        return results, duplicates

    created = display.moment_column("created_at", "created", ordering=True)

    @admin.display(description="duration")
    def duration(self, execution):
        return display.duration(execution.started_at, execution.ended_at)

    @admin.display(description="operations")
    def operations(self, execution):
        # A completed execution's failed steps were handled by the workflow (it caught them, or
        # they were optional): counted, not shown as a failure.
        handled = execution.status == ExecutionStatus.COMPLETED
        badges = []
        for state, count in execution.operations_summary.items():
            if count and handled and state == OperationState.FAILED:
                badges.append(("failed sy-handled", "failed, and handled by the workflow", count, "failed (handled)"))
            elif count:
                badges.append((state, state, count, state))
        return format_html_join(" ", '<span class="sy-count sy-{}" title="{}">{} {}</span>', badges) or "—"

    # --- permissions: read-only records, deleted only once ended -------------------------------

    def get_queryset(self, request):
        return permissions.visible(request.user, super().get_queryset(request))

    def has_view_permission(self, request, obj=None):
        return permissions.allows(request.user, "view", obj.workflow_id if obj is not None else None)

    def has_add_permission(self, request):
        return permissions.allows(request.user, "start")

    def has_change_permission(self, request, obj=None):
        return False  # statuses change through the actions; the rest of a row is history

    def has_delete_permission(self, request, obj=None):
        if obj is not None and not (obj.is_terminal and obj.pk in retention.deletable([obj.pk])):
            return False  # active, or an active execution above or below it
        return permissions.allows(request.user, "delete", obj.workflow_id if obj is not None else None)

    # Deleting goes through ``retention``, with Django's confirmation pages: their own
    # listing of what goes would load every operation and event of each execution to name it
    # (a million rows for a long history), and refuse since nobody may delete those by hand.
    # They go with their execution: counted on the page, deleted in batches.

    def get_deleted_objects(self, objs, request):
        executions = list(objs)
        counts = retention.delete_executions([execution.pk for execution in executions], dry_run=True)
        listed = [format_html('{}: <a href="{}">{}</a>', self.opts.verbose_name.capitalize(),
                              reverse("admin:workflows_app_execution_change", args=[execution.pk]), execution)
                  for execution in executions[:DELETE_LISTED]]
        if len(executions) > DELETE_LISTED:
            listed.append(f"… and {len(executions) - DELETE_LISTED} more")
        summary = {"executions (with their children)": counts.executions, "operations": counts.operations,
                   "events": counts.events}
        return listed, summary, set(), []

    def delete_model(self, request, obj):
        self.delete_queryset(request, Execution.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        counts = retention.delete_executions(queryset)
        if counts.kept:
            self.message_user(request, f"{counts.kept} execution(s) left alone: one above or below became active, "
                              "or was being changed meanwhile", messages.WARNING)

    # The list's actions (``_bulk_action``): one method per action, as Django's actions ask.
    has_cancel_permission = _may("cancel")
    has_force_cancel_permission = _may("force-cancel")
    has_kill_permission = _may("kill")
    has_resume_permission = _may("resume")
    has_force_resume_permission = _may("force-resume")
    has_pause_permission = _may("pause")
    has_unpause_permission = _may("unpause")

    # --- the pages ------------------------------------------------------------------------------

    def get_urls(self):
        view = self.admin_site.admin_view
        info = self.opts.app_label, self.opts.model_name
        return [
            path("<path:object_id>/graph/", view(self.graph_view), name="%s_%s_graph" % info),
            path("<path:object_id>/timeline/", view(functools.partial(timeline.view, self)),
                 name="%s_%s_timeline" % info),
            path("<path:object_id>/act/", view(self.act_view), name="%s_%s_act" % info),
            path("<path:object_id>/rerun/", view(self.rerun_view), name="%s_%s_rerun" % info),
        ] + super().get_urls()

    def _execution_or_redirect(self, request, object_id):
        """The execution the URL names and the user may see; (None, a redirect saying why) if not."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        execution = self.get_object(request, object_id)
        if execution is None:
            self.message_user(request, f"no execution {object_id!r}", messages.WARNING)
            return None, redirect(reverse("admin:workflows_app_execution_changelist"))
        if not self.has_view_permission(request, execution):
            raise PermissionDenied
        return execution, None

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """The execution's page. Queries: the execution, its count per state, a page of its
        operations, its latest events, and (only when it is too big to draw) its summary per
        operation — whatever the number of operations."""
        execution, refused = self._execution_or_redirect(request, object_id)
        if refused:
            return refused
        summary = queries.operations_summary(execution.pk)
        total = sum(summary.values())
        # Past GRAPH_DRAW_LIMIT operations, whether the boxes (fan-outs grouped) are few enough to
        # draw is read (two queries) up to picture.READ_LIMIT operations.
        drawn = total <= GRAPH_DRAW_LIMIT or picture.of(execution.pk, total) is not None
        state = request.GET.get("state")
        state = state if state in OperationState.values else None
        summary, page = self._operations_page(execution.pk, summary, state, request.GET.get("page"))
        total = sum(summary.values())
        events = list(Event.objects.filter(execution_id=execution.pk).order_by("-id")[:LATEST_EVENTS])
        children = list(self.get_queryset(request).filter(parent_id=execution.pk).order_by("created_at")
                        .only("id", "workflow_id", "status", "parent_step")[:CHILDREN_SHOWN + 1])
        reruns = list(self.get_queryset(request).filter(rerun_of_id=execution.pk).order_by("created_at")
                      .only("id", "status", "rerun_from", "created_at")[:CHILDREN_SHOWN + 1])
        may_rerun = total > 0 and permissions.allows(request.user, "start", execution.workflow_id)
        resumed_at = (Event.objects.filter(execution_id=execution.pk, type=EventType.WORKFLOW_RESUMED)
                      .order_by("-id").values_list("timestamp", flat=True).first())
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"{execution.workflow_id} · {execution.pk}",
            "crumb": f"{execution.workflow_id} {str(execution.pk)[:8]}",
            "execution": execution,
            "status_badge": display.badge(execution.status),
            "resumed_at": resumed_at,
            # The run shown is the latest: after a resume, it counts from the resume.
            "duration": display.duration(resumed_at or execution.started_at, execution.ended_at),
            "active": not execution.is_terminal,
            "summary": summary,
            "total": total,
            "state_filter": state,
            "page": page,
            "operations": [self._operation_row(operation) for operation in page.object_list],
            "events": events,
            "parent": execution.parent if execution.parent_id else None,
            "warnings": queries.warnings(execution.pk),
            "children": [{"execution": child, "badge": display.badge(child.status)} for child in children[:CHILDREN_SHOWN]],
            "more_children_url": (reverse("admin:workflows_app_execution_changelist") + f"?parent__id__exact={execution.pk}"
                                  if len(children) > CHILDREN_SHOWN else None),
            "reruns": [{"execution": rerun, "badge": display.badge(rerun.status)} for rerun in reruns[:CHILDREN_SHOWN]],
            "more_reruns_url": (reverse("admin:workflows_app_execution_changelist") + f"?rerun_of__id__exact={execution.pk}"
                                if len(reruns) > CHILDREN_SHOWN else None),
            "rerun_steps": (list(Operation.objects.filter(execution_id=execution.pk).order_by("pending_at", "id")
                                 .values_list("name", flat=True)[:RERUN_STEPS_OFFERED]) if may_rerun else None),
            "rerun_url": reverse("admin:workflows_app_execution_rerun", args=[execution.pk]),
            "change_url": reverse("admin:workflows_app_execution_change", args=[CHANGE_URL_ID]),
            "events_url": reverse("admin:workflows_app_event_changelist") + f"?execution__id__exact={execution.pk}",
            # The executions of its concurrency key, which the list shows newest first: the queued ones
            # start oldest first.
            "concurrency_url": (reverse("admin:workflows_app_execution_changelist") + "?"
                                + urlencode({"concurrency_key": execution.concurrency_key})
                                if execution.concurrency_key else None),
            "parameters": display.pretty_json(execution.parameters),
            "payload": display.pretty_json(execution.payload),
            # An active execution's picture is drawn (and refreshed) before its first operation.
            "draw_graph": drawn and (total > 0 or not execution.is_terminal),
            "graph_limit": GRAPH_DRAW_LIMIT,
            "by_operation": None if drawn else queries.by_operation_and_state(execution.pk),
            "states": OperationState.values,
            "graph_url": reverse("admin:workflows_app_execution_graph", args=[execution.pk]),
            "timeline_url": reverse("admin:workflows_app_execution_timeline", args=[execution.pk]),
            "act_url": reverse("admin:workflows_app_execution_act", args=[execution.pk]),
            "refresh_ms": REFRESH_SECONDS * 1000,
            "actions_offered": [
                {"name": action, "label": ACTION_LABELS[action], "help": ACTION_HELP[action],
                 "confirm": action in services.FORCE_ACTIONS}
                for action in services.actions_for(execution.status)
                if permissions.allows(request.user, action, execution.workflow_id)],
            "can_delete": self.has_delete_permission(request, execution),
            "flower": display.flower_url(""),
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/workflows_app/execution/detail.html", context)

    def _operations_page(self, execution_id, summary, state, number):
        """A page of the execution's operations (those in ``state``) and the counts per state
        they agree with. The counts, read before the rows, are read again after them until they
        did not move in between: else a step that ended between the two reads would show
        "started 1" above rows all succeeded. Nearly always one query more than the rows."""
        operations = Operation.objects.filter(execution_id=execution_id).order_by("pending_at", "id")
        if state:
            operations = operations.filter(state=state)
        operations = operations.only("id", "execution_id", "name", "operation", "agent", "local", "state", "attempt",
                                     "current_retries", "error", "started_at", "succeeded_at", "failed_at",
                                     "cancelled_at", "flow_wait", "rate_key", "concurrency_key")
        for _ in range(CONSISTENT_READS):
            paginator = Paginator(operations, OPERATIONS_PER_PAGE)
            paginator.count = summary[state] if state else sum(summary.values())  # known already: no COUNT query
            page = paginator.get_page(number)
            page.object_list = list(page.object_list)
            again = queries.operations_summary(execution_id)
            if again == summary:
                break
            summary = again
        return summary, page

    def _operation_row(self, operation):
        ended = operation.succeeded_at or operation.failed_at or operation.cancelled_at
        return {
            "operation": operation,
            "badge": display.badge(operation.state),
            "duration": display.duration(operation.started_at, ended if operation.is_terminal else None),
            "error": display.error_line(operation.error),
            "waiting": display.flow_wait(operation),
            "flower": display.flower_task_url(operation.task_id) if operation.attempt and not operation.local else None,
            "url": reverse("admin:workflows_app_operation_change", args=[operation.pk]),
        }

    def graph_view(self, request, object_id):
        """The graph as JSON for the page's picture (``picture.of``: with its groups of siblings),
        with the execution's status (the picture stops refreshing once it has ended)."""
        execution = self.get_object(request, object_id)
        if execution is None or not self.has_view_permission(request, execution):
            return JsonResponse({"error_code": "not_found", "message": f"no execution {object_id!r}"}, status=404)
        graph = picture.of(execution.pk)
        data = {"status": execution.status, "active": not execution.is_terminal, "too_large": graph is None}
        data.update(graph or {"nodes": [], "edges": [], "order": [], "groups": []})
        return JsonResponse(data)

    def act_view(self, request, object_id):
        """A button of the page: the action, after a confirmation page for the force ones."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        execution, refused = self._execution_or_redirect(request, object_id)
        if refused:
            return refused
        action = request.POST.get("action")
        if action not in services.ACTIONS:
            self.message_user(request, f"unknown action {str(action)[:50]!r}", messages.ERROR)
        elif (action in services.FORCE_ACTIONS and request.POST.get("confirmed") != "yes"
              and permissions.allows(request.user, action, execution.workflow_id)):
            return self.confirm_page(request, action, [execution.pk])
        else:  # the service refuses what the user may not do, and take_action says so
            take_action(self, request, action, [execution.pk])
        return HttpResponseRedirect(reverse("admin:workflows_app_execution_change", args=[execution.pk]))

    def rerun_view(self, request, object_id):
        """"Run again from step": ``services.rerun`` with the original's parameters, then the new
        execution's page; a refusal is a message on the original's page."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        execution, refused = self._execution_or_redirect(request, object_id)
        if refused:
            return refused
        try:
            rerun = services.rerun(execution.pk, request.POST.get("from_step", ""), user=request.user)
        except (ParameterError, PermissionRefused, ExistingRunningExecution, RegistrationError) as exc:
            self.message_user(request, " ".join(str(exc).split()), messages.ERROR)
            return HttpResponseRedirect(reverse("admin:workflows_app_execution_change", args=[execution.pk]))
        self.message_user(request, f"execution {rerun.pk} runs {execution.workflow_id} again from step "
                          f"{rerun.rerun_from!r}: it is {rerun.status}", messages.SUCCESS,
                          extra_tags=said_tags(rerun.status))
        return HttpResponseRedirect(reverse("admin:workflows_app_execution_change", args=[rerun.pk]))

    def confirm_page(self, request, action, execution_ids, *, matching=None):
        """"Are you sure?" for a force action on these executions (from a button or the list).
        ``matching``: all the executions the list's filters match (its "select all"), counted and
        asked again as such; ``execution_ids`` are then the rows checked, which Django's list wants back."""
        chosen = Execution.objects.filter(pk__in=execution_ids) if matching is None else matching
        shown = list(chosen.only("id", "workflow_id", "status")[:100])
        count = len(execution_ids) if matching is None else chosen.count()
        return TemplateResponse(request, "admin/workflows_app/execution/confirm_action.html", {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"{ACTION_LABELS[action]}: are you sure?",
            "action": action,
            "label": ACTION_LABELS[action],
            "help": ACTION_HELP[action],
            "executions": shown,
            "more": count - len(shown),
            "count": count,
            "ids": execution_ids,
            "select_across": matching is not None,
            "from_list": request.POST.get("action") != action,  # a list action posts its function's name
            "act_url": reverse("admin:workflows_app_execution_act", args=[execution_ids[0]]) if execution_ids else "",
        })

    def add_view(self, request, form_url="", extra_context=None):
        """"Start execution": the form, then ``services.start`` — the API's checks and refusals."""
        if not self.has_add_permission(request):
            raise PermissionDenied
        startable = {name: definition for name, definition in sorted(workflows().items())
                     if permissions.allows(request.user, "start", name)}
        chosen = request.GET.get("workflow")
        if chosen is not None and chosen not in startable:
            self.message_user(request, f"no workflow {chosen[:100]!r} that you may start: choose one below",
                              messages.WARNING)
        # One workflow (?workflow=name): a field per parameter; else any, its parameters as JSON.
        form = StartExecutionForm(request.POST or None, definition=startable.get(chosen))
        if form.definition is None:
            form.fields["workflow"].choices = [(name, name) for name in startable]
        if request.method == "POST" and form.is_valid():
            try:
                execution = services.start(form.cleaned_data["workflow"], user=request.user, **form.start_arguments())
            except idempotency.IdempotencyConflict as exc:  # this page was submitted before, with other values
                form.add_error(None, f"This page was submitted before with other values and started execution "
                                     f"{exc.execution_id}. Submit it again to start another execution.")
                form.renew_key()
            except (RegistrationError, PermissionRefused) as exc:
                form.add_error("workflow", str(exc))
            except ParameterError as exc:
                form.add_error(form.parameters_field, str(exc))
            except ExistingRunningExecution as exc:
                form.add_error("deployment_id", str(exc))
            except BrokerError as exc:  # raised after the commit: the execution is recorded, pending
                self.message_user(request, f"the execution was recorded, but the message broker did not answer "
                                  f"({exc}); a manager starts it once the broker answers", messages.WARNING)
                return HttpResponseRedirect(reverse("admin:workflows_app_execution_changelist"))
            else:
                if execution.idempotent_replay:  # the same form submitted again: nothing was started now
                    self.message_user(request, f"this form was already submitted: it started execution "
                                      f"{execution.pk}, which is {execution.status}; nothing was started again",
                                      messages.WARNING)
                else:
                    self.message_user(request, f"started {execution.workflow_id}: execution {execution.pk} is "
                                      f"{execution.status}", messages.SUCCESS, extra_tags=said_tags(execution.status))
                return HttpResponseRedirect(reverse("admin:workflows_app_execution_change", args=[execution.pk]))
        registered = [{"name": name, "parameters": definition.parameters(),
                       "failure_mode": definition.failure_mode or "", "timeout": definition.timeout}
                      for name, definition in startable.items()]
        return TemplateResponse(request, "admin/workflows_app/execution/start.html", {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Start {form.definition.name}" if form.definition else "Start an execution",
            "form": form,
            "chosen": form.definition.name if form.definition else None,
            "workflows": registered,
            **(extra_context or {}),
        })
