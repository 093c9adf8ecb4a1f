"""How the admin shows statuses, durations, JSON and links to Flower: small pure functions the
pages and lists share."""

import json
from urllib.parse import quote

from django.utils import timezone
from django.utils.html import format_html

from workflows_app.conf import workflows_settings


def badge(value):
    """A status or state as a coloured badge (its colour comes from admin.css, by value)."""
    return format_html('<span class="sy-badge sy-{}">{}</span>', value, value)


def duration(started_at, ended_at):
    """How long it ran (until now while it runs), as ``1h 02m 03s``; "" if it never started."""
    if started_at is None:
        return ""
    return human_seconds(((ended_at or timezone.now()) - started_at).total_seconds())


def age(moment):
    """How long ago ``moment`` was, as ``3s ago``; "never" for none."""
    if moment is None:
        return "never"
    return f"{human_seconds((timezone.now() - moment).total_seconds())} ago"


def human_seconds(seconds):
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {seconds:02d}s"
    if minutes:
        return f"{minutes}m {seconds:02d}s"
    return f"{seconds}s"


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

