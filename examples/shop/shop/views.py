"""The shop's own API: it runs under the shop's REST_FRAMEWORK defaults (anyone may call it),
while Switchyard's endpoints under ``ops/api/`` keep their own (a logged-in user)."""

from rest_framework.decorators import api_view
from rest_framework.response import Response


@api_view(["GET"])
def health(request):
    return Response({"ok": True})
