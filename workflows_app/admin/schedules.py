"""Django admin for schedules: a list (workflow, timing, time zone, overlap policy, paused, next
and last run), a form that creates or changes one, its latest slots with their executions (missed
runs included), and the actions pause, resume and trigger now — on the list's selection and as
buttons on a schedule's page.

Everything goes through the one service, ``workflows_app.schedules``: the form checks its data
with ``schedules.check`` / ``schedules.check_change`` (a refusal is an error on the form, at the
field it names; so are slots closer than the minimum interval, ``WORKFLOWS["SCHEDULE_MIN_INTERVAL"]``,
from a user who is not a superuser) and saves with ``schedules.create`` / ``schedules.update``;
the actions and the deletes call the service's, and every refusal becomes a message. Who may see
and do what is ``workflows_app.permissions``' rule, the same as for the schedule's executions: a
user who may change a schedule but not start its workflow sees what it starts and when
(``schedules.STARTING``) read-only, may not unpause it (an error on the form; no Resume), and may
still pause it and change its overlap policy, catch-up window and jitter.
"""

from django import forms
from django.contrib import admin, messages
from django.db import DatabaseError
from django.http import HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join

from workflows_app import permissions, schedules
from workflows_app.admin import display
from workflows_app.admin.executions import WorkflowFilter
from workflows_app.admin.forms import CheckedJSONField
from workflows_app.errors import ParameterError, PermissionRefused, RegistrationError, SwitchyardError
from workflows_app.models import Schedule
from workflows_app.registry import workflows

#: The slots a schedule's page shows, newest first (its executions are all a link away).
SLOTS_SHOWN = 50
ACTION_LABELS = {"pause": "Pause", "resume": "Resume", "trigger": "Trigger now"}
ACTION_HELP = {
    "pause": "no slot fires until it is resumed; a run already started goes on",
    "resume": "slots fire again from the next one after now (those that fell while paused do not run)",
    "trigger": "start a run now, under the overlap policy, paused or not",
}


class ScheduleForm(forms.ModelForm):
    """A schedule's fields; what they hold together is checked by ``schedules.check``."""

    parameters = CheckedJSONField(label="Parameters", initial=dict, required=False,
                                  widget=forms.Textarea(attrs={"rows": 6, "cols": 60, "class": "vLargeTextField"}),
                                  help_text='a JSON object, e.g. {"n": 3}: the parameters of each execution')
    #: Who fills it in (``ScheduleAdmin.get_form`` sets it).
    user = None

    class Meta:
        model = Schedule
        fields = ["workflow_id", *schedules.EDITABLE]
        help_texts = {"cron": "a cron expression (minute hour day-of-month month day-of-week), e.g. 0 3 * * 1-5; "
                              "or an interval",
                      "interval": "seconds between two runs; or a cron expression",
                      "timezone": "the IANA time zone the cron expression is read in, e.g. Europe/Paris"}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "workflow_id" in self.fields:  # adding: the workflows the user may schedule
            self.fields["workflow_id"] = forms.ChoiceField(
                label="workflow", choices=[(name, name) for name in sorted(workflows())
                                           if permissions.allows(self.user, "schedule", name)])

    def clean_parameters(self):
        parameters = self.cleaned_data["parameters"]
        return {} if parameters in (None, "") else parameters

    def clean(self):
        data = super().clean()
        if any(name in self.errors for name in self.fields):
            return data  # each field's own error first: the whole is checked once they are right
        given = {name: data.get(name) for name in schedules.EDITABLE if name in self.fields}
        try:
            if "workflow_id" in self.fields:  # adding
                schedules.check(data["workflow_id"], **given, min_interval=schedules.min_interval(self.user))
            else:  # changing: what the user may change, as the service's update checks it
                schedules.check_change(self.instance, user=self.user, **given)
        except RegistrationError as refused:
            self.add_error("workflow_id" if "workflow_id" in self.fields else None, str(refused))
        except PermissionRefused as refused:
            self.add_error(None, str(refused))
        except ParameterError as refused:
            self.add_error(field_named(str(refused), self.fields), " ".join(str(refused).split()))
        return data

    def service_arguments(self) -> dict:
        """The keyword arguments of ``schedules.create`` / ``schedules.update`` the form gives:
        its fields (one read-only for the user is not one of them)."""
        return {name: self.cleaned_data[name] for name in schedules.EDITABLE if name in self.fields}


def field_named(message, fields):
    """The field a refusal is about: the one its message names first (``cron: ...``,
    ``parameters.n: ...``, ``exactly one of cron and interval``), else None (the whole form).
    One named is shown at that field, which also keeps Django's own check of the model's
    constraints from saying it a second time."""
    head = message.split(":", 1)[0] if ":" in message else message
    for text in (head, message):
        found = sorted((text.find(name), name) for name in fields if name in text)
        if found:
            return found[0][1]
    return None


def take_action(modeladmin, request, action, schedule_ids):
    """``action`` on each schedule through its service, and how each went: the one place this
    admin turns a refusal into a message."""
    for pk in schedule_ids:
        try:
            done = schedules.ACTIONS[action](pk, user=request.user)
        except Schedule.DoesNotExist:
            modeladmin.message_user(request, f"{action}: schedule {pk} no longer exists", messages.WARNING)
        except PermissionRefused as refused:
            modeladmin.message_user(request, f"{action} refused: {refused}", messages.ERROR)
        except SwitchyardError as refused:  # trigger: the workflow or its parameters no longer fit
            modeladmin.message_user(request, f"{action} refused: {' '.join(str(refused).split())}", messages.ERROR)
        except DatabaseError as exc:
            modeladmin.message_user(request, f"{action} of {pk} failed: the database refused it ({exc})",
                                    messages.ERROR)
        else:
            modeladmin.message_user(request, said(action, pk, done), messages.SUCCESS)


def said(action, pk, done) -> str:
    """What an action did, in one line."""
    if action != "trigger":
        return f"schedule {pk} is {'paused' if done.paused else 'active'}"
    outcome = f"{done.outcome}" + (f": execution {done.execution_id}" if done.execution_id else "")
    return f"triggered schedule {pk}: {outcome}" + (f" ({done.reason})" if done.reason else "")


def _list_action(action):
    def run(modeladmin, request, queryset):
        take_action(modeladmin, request, action, list(queryset.values_list("pk", flat=True)))

    run.__name__ = f"{action}_selected"
    return admin.action(description=f"{ACTION_LABELS[action]}: the selected schedules", permissions=[action])(run)


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = ["short_id", "workflow_id", "timing", "timezone", "overlap", "state", "next_run", "last_run"]
    list_display_links = ["short_id", "workflow_id"]
    list_filter = ["paused", "overlap", WorkflowFilter]
    search_fields = ["^id", "workflow_id"]
    search_help_text = "a schedule id (or its start) or a workflow"
    ordering = ["-created_at"]
    list_per_page = 50
    actions = [_list_action(action) for action in schedules.ACTIONS]
    readonly_fields = ["next_run", "last_run", "buffered", "created", "created_by", "executions_link", "slots_table"]

    class Media:
        css = {"all": ["workflows_app/admin.css"]}

    def get_fieldsets(self, request, obj=None):
        timing = ["cron", "interval", "timezone", "overlap", "catchup_window", "jitter", "paused"]
        if obj is None:
            return [(None, {"fields": ["workflow_id", "parameters"]}), ("When", {"fields": timing})]
        return [(None, {"fields": ["workflow_id", "parameters"]}), ("When", {"fields": timing}),
                ("Runs", {"fields": ["next_run", "last_run", "buffered", "created", "created_by", "executions_link",
                                    "slots_table"]})]

    def get_readonly_fields(self, request, obj=None):
        fixed = ["workflow_id"] if obj is not None else []  # a schedule's workflow never changes
        if obj is not None and not permissions.allows(request.user, "start", obj.workflow_id):
            fixed += schedules.STARTING  # what it starts and when: what starting the workflow needs
        return fixed + list(self.readonly_fields)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        return type(form.__name__, (form,), {"user": request.user})

    # --- the list -------------------------------------------------------------------------------

    @admin.display(description="schedule", ordering="id")
    def short_id(self, schedule):
        return str(schedule.pk)[:8]

    @admin.display(description="timing")
    def timing(self, schedule):
        return schedule.cron if schedule.cron else f"every {display.human_seconds(schedule.interval)}"

    @admin.display(description="state", ordering="paused")
    def state(self, schedule):
        return display.badge("paused" if schedule.paused else "active")

    next_run = display.moment_column("next_run_at", "next run", ordering=True)
    last_run = display.moment_column("last_run_at", "last run", ordering=True)
    buffered = display.moment_column("buffered_slot", "slot waiting (buffer_one)")
    created = display.moment_column("created_at", "created")

    @admin.display(description="executions")
    def executions_link(self, schedule):
        url = reverse("admin:workflows_app_execution_changelist") + f"?schedule__id__exact={schedule.pk}"
        return format_html('<a href="{}">all the executions of this schedule ›</a>', url)

    @admin.display(description=f"latest slots (up to {SLOTS_SHOWN})")
    def slots_table(self, schedule):
        rows = schedules.recent_slots(schedule, SLOTS_SHOWN)
        if not rows:
            return "none yet"
        # A slot that started an execution is anchored by it: that execution's page links here.
        body = format_html_join("", '<tr id="{}"><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>', (
            (f"slot-of-{slot.execution_id}" if slot.execution_id else f"slot-{slot.pk}", slot_time(slot),
             display.badge(slot.outcome), execution_cell(slot), slot.reason or "—")
            for slot in rows))
        return format_html('<table class="sy-table" id="sy-slots"><thead><tr><th>slot</th><th>outcome</th>'
                           '<th>execution</th><th>reason</th></tr></thead><tbody>{}</tbody></table>', body)

    # --- who may do what -------------------------------------------------------------------------

    def get_queryset(self, request):
        return schedules.visible(request.user, super().get_queryset(request))

    def has_view_permission(self, request, obj=None):
        return permissions.allows(request.user, "view", obj.workflow_id if obj is not None else None)

    def has_add_permission(self, request):
        return permissions.allows(request.user, "schedule")

    def has_change_permission(self, request, obj=None):
        return permissions.allows(request.user, "change", obj.workflow_id if obj is not None else None)

    def has_delete_permission(self, request, obj=None):
        return permissions.allows(request.user, "delete", obj.workflow_id if obj is not None else None)

    def has_pause_permission(self, request):
        return permissions.allows(request.user, "pause")

    def has_resume_permission(self, request):
        # Unpausing starts the schedule's slots again: what starting needs too.
        return permissions.allows(request.user, "resume") and permissions.allows(request.user, "start")

    def has_trigger_permission(self, request):
        return permissions.allows(request.user, "trigger")

    # --- saving and deleting: the service's --------------------------------------------------------

    def save_model(self, request, obj, form, change):
        try:
            if change:
                saved = schedules.update(obj.pk, user=request.user, **form.service_arguments())
            else:
                saved = schedules.create(form.cleaned_data["workflow_id"], user=request.user,
                                         **form.service_arguments())
        except (SwitchyardError, Schedule.DoesNotExist) as refused:  # changed since the form was checked
            self.message_user(request, f"not saved: {' '.join(str(refused).split()) or 'the schedule is gone'}",
                              messages.ERROR)
            return
        for field in Schedule._meta.concrete_fields:
            setattr(obj, field.attname, getattr(saved, field.attname))

    def delete_model(self, request, obj):
        self.delete_queryset(request, Schedule.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset):
        for pk in queryset.values_list("pk", flat=True):
            try:
                schedules.delete(pk, user=request.user)
            except Schedule.DoesNotExist:
                pass  # deleted meanwhile: what was asked
            except PermissionRefused as refused:
                self.message_user(request, f"delete refused: {refused}", messages.ERROR)

    def get_deleted_objects(self, objs, request):
        """What a delete's confirmation page names: the schedules, and a count of their slots (not
        each one). Their executions stay."""
        found = list(objs)
        listed = [format_html('Schedule: <a href="{}">{}</a>', reverse("admin:workflows_app_schedule_change",
                                                                        args=[schedule.pk]), schedule)
                  for schedule in found]
        slots = sum(schedule.slots.count() for schedule in found)
        return listed, {"schedules": len(found), "slot records (their executions stay)": slots}, set(), []

    # --- a schedule's buttons ----------------------------------------------------------------------

    def get_urls(self):
        info = self.opts.app_label, self.opts.model_name
        return [path("<path:object_id>/act/", self.admin_site.admin_view(self.act_view), name="%s_%s_act" % info),
                *super().get_urls()]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        schedule = self.get_object(request, object_id)
        offered = []
        if schedule is not None:
            offered = [{"name": action, "label": ACTION_LABELS[action], "help": ACTION_HELP[action]}
                       for action in schedules.ACTIONS
                       if (action != "pause" or not schedule.paused) and (action != "resume" or schedule.paused)
                       and permissions.allows(request.user, action, schedule.workflow_id)
                       and (action != "resume" or permissions.allows(request.user, "start", schedule.workflow_id))]
        context = {"actions_offered": offered,
                   "act_url": reverse("admin:workflows_app_schedule_act", args=[object_id]) if schedule else ""}
        return super().change_view(request, object_id, form_url, {**context, **(extra_context or {})})

    def act_view(self, request, object_id):
        """A button of the page: the action through its service; how it went is a message."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        action = request.POST.get("action")
        if action not in schedules.ACTIONS:
            self.message_user(request, f"unknown action {str(action)[:50]!r}", messages.ERROR)
        else:
            take_action(self, request, action, [object_id])
        return HttpResponseRedirect(reverse("admin:workflows_app_schedule_change", args=[object_id]))


def slot_time(slot) -> str:
    """A slot's moment; a run of missed ones as ``first → last (n slots)``."""
    if slot.slots > 1 or slot.until:
        return f"{display.moment(slot.slot)} → {display.moment(slot.until)} ({slot.slots} slots)"
    return display.moment(slot.slot)


def execution_cell(slot):
    if slot.execution_id is None:
        return "—"
    return format_html('<a href="{}">{}</a>', reverse("admin:workflows_app_execution_change",
                                                       args=[slot.execution_id]), str(slot.execution_id)[:8])
