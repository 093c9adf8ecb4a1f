"""The API's throttles: DRF's per-user rate throttle, in two scopes.

``read`` counts GET, HEAD and OPTIONS; ``write`` counts every other method (starts, actions,
events). Their rates are ``WORKFLOWS["API_THROTTLE_RATES"]`` (``workflows_app.conf``; default
``{"read": "1200/minute", "write": "240/minute"}``; ``None``: no limit), read at each request,
never the host's ``REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]``. Over a rate the answer is 429
``throttled`` with ``Retry-After`` (seconds).

Each user is counted apart (by its primary key). Requests without valid credentials are not
throttled here, deliberately: DRF refuses them (401) before any throttle runs, having read at most
the row of the token or session they present — never their body, never an execution —, so a
throttle, which costs a cache read and write, would cost as much as the refusal it replaced. A
flood of them is for the reverse proxy to rate-limit, by the client's address, which only the
proxy knows (behind it, every request comes from the proxy's address, and ``X-Forwarded-For`` is
whatever the client wrote). Should a throttle see an anonymous request anyway, DRF's
``UserRateThrottle`` counts it by address. (A read by a user without the view permission is
refused 403 before the throttles too, as cheaply; a write a service refuses is counted.)

The counts live in Django's cache (``CACHES["default"]``). With the default ``LocMemCache``
each web process counts apart, so N processes let a user make N times the rate; a cache the
processes share (Redis, Memcached) makes the rate the whole server's. DRF reads and writes a
count without a lock: requests of one user that arrive together may each take the last place.
"""

from rest_framework.permissions import SAFE_METHODS
from rest_framework.throttling import UserRateThrottle

from workflows_app.conf import workflows_settings


class SwitchyardRateThrottle(UserRateThrottle):
    """A user's requests of one scope, at the rate ``WORKFLOWS["API_THROTTLE_RATES"][scope]``."""

    #: Whether the scope counts the safe methods (GET, HEAD, OPTIONS) or the others.
    reads = True
    # Apart from the counts of the host's own throttles, whose scopes may have the same names.
    cache_format = "switchyard_throttle_%(scope)s_%(ident)s"

    def get_rate(self):
        """The scope's rate from ``WORKFLOWS`` (DRF's would read the host's REST_FRAMEWORK);
        DRF makes a throttle per request, so a change of the setting applies at once."""
        return workflows_settings.API_THROTTLE_RATES.get(self.scope)

    def allow_request(self, request, view):
        if (request.method in SAFE_METHODS) != self.reads:
            return True  # the other scope's request
        return super().allow_request(request, view)


class ReadRateThrottle(SwitchyardRateThrottle):
    """GET, HEAD and OPTIONS."""

    scope = "read"
    reads = True


class WriteRateThrottle(SwitchyardRateThrottle):
    """Every other method: starts, actions, events."""

    scope = "write"
    reads = False
