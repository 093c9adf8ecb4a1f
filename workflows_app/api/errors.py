"""API errors and the one exception handler (every view's: ``SwitchyardView.get_exception_handler``).

Every error answers ``{"error_code": "...", "message": "..."}``. DRF's own errors keep
their codes (``parse_error``, ``not_authenticated``, ``authentication_failed``,
``permission_denied``, ``not_found``, ``method_not_allowed``, ``not_acceptable``,
``unsupported_media_type``, ``throttled``), except that every ``ValidationError`` is
``invalid_parameters``. The domain's refusals are the ``APIException`` subclasses below, which
views raise when they translate a service's error.
"""

import logging

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from kombu.exceptions import OperationalError as BrokerError
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from workflows_app import outages
from workflows_app.errors import PermissionRefused, ValueRefused

logger = logging.getLogger(__name__)

INVALID_PARAMETERS = "invalid_parameters"


class InvalidParameters(exceptions.APIException):
    """Input that does not fit: wrong types, missing or unknown workflow parameters."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = "invalid parameters"
    default_code = INVALID_PARAMETERS


class PayloadTooLarge(exceptions.APIException):
    """A value larger than ``WORKFLOWS["MAX_PAYLOAD_BYTES"]``, or a request body larger than the
    server takes; nothing was stored."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "the value is too large"
    default_code = "payload_too_large"


class UnknownWorkflow(exceptions.APIException):
    """A ``workflow_id`` naming no registered workflow."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = "no such workflow"
    default_code = "unknown_workflow"


class UnknownAction(exceptions.APIException):
    """An ``action`` that is a string but none of the actions."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = "no such action"
    default_code = "unknown_action"


class ExistingRunningExecution(exceptions.APIException):
    """A start for a deployment that has an active execution, without ``queue`` or ``force``."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_detail = "the deployment has an active execution"
    default_code = "existing_running_execution"


class InvalidTransition(exceptions.APIException):
    """An action the execution's status does not allow; nothing changed."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = "the action is not allowed in the execution's status"
    default_code = "invalid_transition"


class ExecutionNotActive(exceptions.APIException):
    """An event for an execution that has ended."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = "the execution has ended"
    default_code = "execution_not_active"


class IdempotencyConflict(exceptions.APIException):
    """A start with an idempotency key the user already used, unexpired, for another request:
    nothing was started."""

    status_code = status.HTTP_409_CONFLICT
    default_detail = "the idempotency key was already used for another request"
    default_code = "idempotency_conflict"


class BrokerUnavailable(exceptions.APIException):
    """The message broker did not answer (the database part of the request was done)."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "the message broker did not answer"
    default_code = "broker_unavailable"


class DatabaseUnavailable(exceptions.APIException):
    """The database did not answer (a restart, a fail-over): nothing was changed; try again."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "the database is unavailable: nothing was changed, try again shortly"
    default_code = "database_unavailable"


#: Seconds a client is asked to wait (``Retry-After``) when the database or the broker is down.
RETRY_AFTER_SECONDS = 5


def exception_handler(exc, context):
    """DRF's handler, with every error answered as ``{"error_code", "message"}``.

    An exception that is not an API error (a bug) is logged with its traceback and answered
    500 ``internal_error`` in the same shape, so a client never has to parse an HTML page.
    The headers DRF sets are kept: ``Retry-After`` of a 429 ``throttled``.
    """
    if isinstance(exc, ValueRefused):  # the one value check (workflows_app.values), from any service
        exc = PayloadTooLarge(str(exc)) if exc.too_large else InvalidParameters(str(exc))
    elif isinstance(exc, PermissionRefused):  # the one permission rule (workflows_app.permissions)
        exc = exceptions.PermissionDenied(str(exc))
    elif isinstance(exc, RequestDataTooBig):  # Django's, when DRF reads a body over its limit
        exc = PayloadTooLarge(f"the request body is larger than the server takes "
                              f"({settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes: DATA_UPLOAD_MAX_MEMORY_SIZE)")
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, BrokerError):
        logger.warning("the broker did not answer: %s", exc)
        exc = BrokerUnavailable(f"the message broker did not answer: {exc}")
    elif outages.is_outage(exc):
        logger.warning("the database did not answer: %s", exc)
        exc = DatabaseUnavailable()

    response = drf_exception_handler(exc, context)
    if response is None:
        logger.error("unhandled error in %s", _where(context), exc_info=exc)
        set_rollback()
        return Response({"error_code": "internal_error", "message": "internal error: see the server log"},
                        status=status.HTTP_500_INTERNAL_SERVER_ERROR)
    response.data = {"error_code": error_code(exc), "message": summarize(exc.detail)}
    if response.status_code == status.HTTP_503_SERVICE_UNAVAILABLE:
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def error_code(exc) -> str:
    if isinstance(exc, exceptions.ValidationError):
        return INVALID_PARAMETERS
    codes = exc.get_codes()
    return codes if isinstance(codes, str) else exc.default_code


def summarize(detail) -> str:
    """A readable one-line message from an error's detail (a string, or the nested lists and
    dicts of a ValidationError: ``field: message; other.sub: message``)."""
    text = "; ".join(f"{path}: {message}" if path else message for path, message in _flatten(detail, "")) or "error"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")  # it may quote a lone surrogate it refused


def _flatten(detail, path):
    if isinstance(detail, dict):
        for key, value in detail.items():
            key = "" if key == api_settings.NON_FIELD_ERRORS_KEY else str(key)
            yield from _flatten(value, f"{path}.{key}" if path and key else path or key)
    elif isinstance(detail, list):
        for item in detail:
            yield from _flatten(item, path)
    else:
        yield path, " ".join(str(detail).split())


def _where(context):
    request = context.get("request")
    return f"{request.method} {request.path}" if request is not None else context.get("view")
