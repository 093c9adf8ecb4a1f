"""Template tags of Switchyard's own admin pages: ``{% load switchyard_admin %}``."""

import django
from django import template

register = template.Library()

#: Django 6.1's admin styles its breadcrumbs as an ordered list; earlier ones, as a ``div`` of links.
ORDERED_BREADCRUMBS = django.VERSION >= (6, 1)


@register.inclusion_tag("admin/workflows_app/breadcrumbs.html")
def breadcrumbs(*crumbs):
    """The admin's breadcrumbs bar in the markup the installed Django styles: ``crumbs`` are a
    link's URL and label, pair after pair, then the page's own label
    (``{% breadcrumbs home "Home" executions "Executions" "Start" %}``)."""
    *links, current = crumbs
    return {"links": list(zip(links[::2], links[1::2])), "current": current, "ordered": ORDERED_BREADCRUMBS}
