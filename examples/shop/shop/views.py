"""The shop's own API: it runs under the shop's REST_FRAMEWORK defaults (anyone may call it),
while Switchyard's endpoints under ``ops/api/`` keep their own (a logged-in user).

``POST /orders/<order_id>/receipt`` enqueues the order's receipt (``shop.tasks.send_receipt``)
in the request's transaction — sent only once it commits — and answers the task's result id;
``GET /receipts/<result id>`` reads that result back, from whichever process asks."""

from django.db import transaction
from django_tasks.exceptions import TaskResultDoesNotExist
from rest_framework.decorators import api_view
from rest_framework.response import Response

from shop.tasks import send_receipt


@api_view(["GET"])
def health(request):
    return Response({"ok": True})


@api_view(["POST"])
def receipt(request, order_id):
    with transaction.atomic():
        result = send_receipt.enqueue(order_id, str(request.data.get("email", "")))
    return Response({"id": result.id, "status": result.status}, status=202)


@api_view(["GET"])
def receipt_status(request, result_id):
    try:
        result = send_receipt.get_result(str(result_id))
    except TaskResultDoesNotExist:
        return Response({"error_code": "not_found", "message": f"no receipt task {result_id}"}, status=404)
    return Response({"id": result.id, "status": result.status, "attempts": result.attempts,
                     "return_value": result.return_value if result.status == "SUCCESSFUL" else None})
