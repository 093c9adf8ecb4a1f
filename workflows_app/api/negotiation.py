"""Content negotiation: DRF's, except that a ``?format=`` no renderer of the endpoint gives is a
406 ``not_acceptable`` (DRF answers 404, which says the path does not exist when it does). The
query parameter is ``format`` whatever the host project's ``URL_FORMAT_OVERRIDE`` says."""

from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import DefaultContentNegotiation

from workflows_app.api.drf_settings import api_settings


class ContentNegotiation(DefaultContentNegotiation):
    settings = api_settings

    def filter_renderers(self, renderers, format):
        matching = [renderer for renderer in renderers if renderer.format == format]
        if not matching:
            offered = ", ".join(sorted({renderer.format for renderer in renderers}))
            raise NotAcceptable(f"no format {format[:50]!r} here; this endpoint gives: {offered}")
        return matching
