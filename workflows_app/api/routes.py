"""Endpoints that other apps add to the API, as ``admin.site.register`` adds a model to the admin.

``agents`` sits on top of ``workflows_app``, which never imports it; yet its endpoint
(``GET agents``) must be served under the one URLconf a host project includes
(``workflows_app.api.urls``). So the agents app registers it from its ``AppConfig.ready()``::

    from workflows_app.api import routes

    routes.register(r"^agents/?$", "agents.api.AgentList", name="agents")

``workflows_app.api.urls`` serves the registered routes after its own and before its JSON 404;
its schema documents them like every other endpoint. Apps are ready before any
URLconf is loaded, so a route registered later than that is an error rather than a route that
never answers.
"""

from django.core.exceptions import ImproperlyConfigured
from django.urls import re_path
from django.utils.module_loading import import_string

_routes = {}  # name -> (regex, view class or its dotted path)
_served = False


def register(regex, view, *, name):
    """Serve ``view`` (a ``SwitchyardView`` class, or its dotted path, imported when the URLconf
    loads) at ``regex``, relative to the API's prefix, as the URL name ``api:<name>``."""
    if _served:
        raise ImproperlyConfigured(f"route {name!r} registered after workflows_app.api.urls was loaded: "
                                   "register routes from an AppConfig.ready()")
    _routes[name] = (regex, view)


def urlpatterns() -> list:
    """The registered routes, for ``workflows_app.api.urls``."""
    global _served
    _served = True
    return [re_path(regex, (import_string(view) if isinstance(view, str) else view).as_view(), name=name)
            for name, (regex, view) in _routes.items()]
