"""How the admin shows statuses, durations, JSON and links to Flower: small pure functions the
pages and lists share."""

import json
from urllib.parse import quote

from django.contrib import admin
from django.urls import reverse
from django.utils import dateformat, timezone
from django.utils.html import format_html

from workflows_app.conf import workflows_settings
from workflows_app.states import FLOW_LIMITS, OPERATION_WAITING_TO_SEND, FlowWait


def badge(value):
    """A status or state as a coloured badge (its colour comes from admin.css, by value)."""
    return format_html('<span class="sy-badge sy-{}">{}</span>', value, value)


#: How every page and list of the admin writes a moment (the detail page's templates use the same).
MOMENT_FORMAT = "Y-m-d H:i:s"


def moment(value):
    """A date and time to the second, in the current time zone, as ``2026-11-26 21:00:49``; "—" for none."""
    if value is None:
        return "—"
    return dateformat.format(timezone.localtime(value) if timezone.is_aware(value) else value, MOMENT_FORMAT)


def moment_column(field, description, ordering=False):
    """A column (or read-only field) of a model admin that shows the moment ``field`` holds, as
    :func:`moment` writes it; sortable by it with ``ordering``."""

    @admin.display(description=description, ordering=field if ordering else None)
    def column(self, obj):
        return moment(getattr(obj, field))

    return column


def duration(started_at, ended_at):
    """How long it ran (until now while it runs), as ``1h 02m 03s``, or ``0.42s`` under a second;
    "" if it never started."""
    if started_at is None:
        return ""
    return human_seconds(((ended_at or timezone.now()) - started_at).total_seconds())


def age(when):
    """How long ago ``when`` was, as ``3s ago``; "never" for none."""
    if when is None:
        return "never"
    return f"{human_seconds((timezone.now() - when).total_seconds())} ago"


def human_seconds(seconds):
    if seconds < 0.995:  # whole seconds would say 0s
        return "<0.01s" if 0 < seconds < 0.005 else f"{max(0.0, seconds):.2f}s"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {seconds:02d}s"
    if minutes:
        return f"{minutes}m {seconds:02d}s"
    return f"{seconds}s"


def execution_link(execution):
    """An execution as the lists of its records name it: workflow and short id, linked to its page."""
    if execution is None:
        return "—"
    return format_html('<a href="{}">{} {}</a>', reverse("admin:workflows_app_execution_change", args=[execution.pk]),
                       execution.workflow_id, str(execution.pk)[:8])


def error_line(error):
    """An operation's error on one line, ``Type: message``; the type only once when the message
    already starts with it (``Cancelled: the execution is cancelling``)."""
    if not error:
        return ""
    kind, message = str(error.get("type") or ""), str(error.get("message") or "")
    if not kind or message.lower().startswith(kind.lower() + ":"):
        return message[:1].upper() + message[1:]
    return f"{kind}: {message}" if message else kind


def flow_wait(operation) -> str:
    """What a step that may be sent waits for, when a limit of its operation holds it back:
    ``waits for <the limit> (<its key>)``; "" otherwise."""
    if operation.state not in OPERATION_WAITING_TO_SEND or operation.flow_wait not in FLOW_LIMITS:
        return ""
    key = operation.rate_key if operation.flow_wait == FlowWait.RATE_LIMIT else operation.concurrency_key
    return f"waits for {FlowWait(operation.flow_wait).label} ({key})"


def pretty_json(value):
    """JSON as an operator reads it: indented, keys in order, non-ASCII kept."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def flower_url(path):
    """The Flower page at ``path`` when ``WORKFLOWS["FLOWER_URL"]`` is set, else None."""
    base = workflows_settings.FLOWER_URL
    return None if not base else f"{base.rstrip('/')}/{path}"


def flower_task_url(task_id):
    return flower_url(f"task/{quote(task_id)}")


def flower_worker_url(nodename):
    return flower_url(f"worker/{quote(nodename)}")

