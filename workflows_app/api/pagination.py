"""Every list is paginated with DRF's limit/offset pagination: ``?limit=&offset=``,
100 by default, at most 1000 (a larger limit is cut down to 1000), answered as
``count/next/previous/results``.

Unlike DRF's, a ``limit`` or ``offset`` that is not a number of the documented range is a 400
``invalid_parameters`` rather than silently replaced by the default: the client asked for
something else than it gets.

Pages bounded in bytes: the lists whose items carry stored values — ``GET
events`` (``message``, ``data``), ``GET executions/{id}/operations`` (``args``, ``kwargs``,
``result``, ``error``) — name those columns in their view's ``page_bytes_fields``. Their page also ends
before ``limit`` items once the next item would take it past :func:`page_bytes` (twice
``WORKFLOWS["MAX_PAYLOAD_BYTES"]``, 4 MiB by default: room for any one value and more), always
holding at least one item, however large; ``next`` continues right after its last item, so
following ``next`` returns every item once. Without the bound, one page of 60 events of 2.4 MB
was 144 MB of JSON and grew the web process by half a gigabyte.

The sizes are the database's: each item counts the bytes of those columns as text (the JSON the
database holds, which is no smaller than the answer's but for escaped characters) plus
:data:`ITEM_BYTES` for the rest of it, summed in the page's own query (a window over the ``limit``
rows the page may hold), so that the rows left out never leave the database.
"""

import re

from django.db.models import F, IntegerField, JSONField, Q, Sum, TextField, Value, Window
from django.db.models.expressions import Func, RowRange
from django.db.models.functions import Cast, Coalesce, RowNumber
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.utils.urls import replace_query_param

from workflows_app.conf import workflows_settings

_DIGITS = re.compile(r"[0-9]+")

#: What an item is counted for besides its ``page_bytes_fields``: its ids, names, states and
#: timestamps, with the JSON around them (a few hundred bytes, rounded up).
ITEM_BYTES = 1024


def page_bytes() -> int:
    """The most a bounded page holds, in bytes of its items (unless its one item is larger)."""
    return 2 * workflows_settings.MAX_PAYLOAD_BYTES


class ByteLength(Func):
    """The length in bytes (UTF-8) of a text value: ``OCTET_LENGTH`` (PostgreSQL, MySQL);
    SQLite's ``LENGTH`` counts characters, unless given a blob."""

    function = "OCTET_LENGTH"
    output_field = IntegerField()

    def as_sqlite(self, compiler, connection, **extra_context):
        return self.as_sql(compiler, connection, template="LENGTH(CAST(%(expressions)s AS BLOB))", **extra_context)


class Pagination(LimitOffsetPagination):
    default_limit = 100
    max_limit = 1000

    def paginate_queryset(self, queryset, request, view=None):
        fields = getattr(view, "page_bytes_fields", ())
        if not fields:
            page = super().paginate_queryset(queryset, request, view)
            self.next_offset = self.offset + self.limit
            return page
        # DRF's steps, with the page's query bounded in bytes.
        self.request = request
        self.limit = self.get_limit(request)
        self.count = self.get_count(queryset)
        self.offset = self.get_offset(request)
        if self.count == 0 or self.offset > self.count:
            page = []
        else:
            page = list(_bounded_page(queryset, self.offset, self.limit, fields, page_bytes()))
        self.next_offset = self.offset + len(page)
        return page

    def get_next_link(self):
        """DRF's, continuing after the page's last item (a page bounded in bytes may hold fewer
        than ``limit``), with the ``limit`` asked for."""
        if self.next_offset >= self.count:
            return None
        url = replace_query_param(self.request.build_absolute_uri(), self.limit_query_param, self.limit)
        return replace_query_param(url, self.offset_query_param, self.next_offset)

    def get_limit(self, request):
        limit = _non_negative_int(request, self.limit_query_param)
        if limit is None:
            return self.default_limit
        if limit < 1:
            raise ValidationError({self.limit_query_param: "must be at least 1."})
        return min(limit, self.max_limit)

    def get_offset(self, request):
        return _non_negative_int(request, self.offset_query_param) or 0

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.limit_query_param:
                parameter["schema"]["minimum"] = 1
                parameter["description"] = (f"Number of results to return per page: {self.default_limit} by "
                                            f"default, at most {self.max_limit} (a larger limit is cut down).")
                if getattr(view, "page_bytes_fields", ()):
                    parameter["description"] += (
                        f" A page also ends before `limit` results once the next one would take it past "
                        f"{page_bytes()} bytes (twice WORKFLOWS['MAX_PAYLOAD_BYTES'], counting "
                        f"{', '.join(view.page_bytes_fields)} as stored and {ITEM_BYTES} bytes for the rest of each "
                        f"result); it holds at least one result, however large. Follow `next`: it continues right "
                        f"after the page's last result.")
            elif parameter["name"] == self.offset_query_param:
                parameter["schema"]["minimum"] = 0
        return parameters


def _non_negative_int(request, name):
    raw = request.query_params.get(name)
    if raw is None:
        return None
    if not _DIGITS.fullmatch(raw):
        raise ValidationError({name: "must be a non-negative integer."})
    try:
        return int(raw)
    except ValueError:  # more digits than int() takes
        raise ValidationError({name: "must be a non-negative integer."}) from None


def _bounded_page(queryset, offset, limit, fields, budget):
    """The page ``queryset[offset:offset + limit]``, ending before the first item that would take
    the sum of the items' sizes past ``budget`` (the first item is always there), in one query: the
    sizes are summed over the page's rows in their order (a window), and only the rows kept are
    sent by the database."""
    ordering = queryset.query.order_by or queryset.model._meta.ordering or ["pk"]
    size = Value(ITEM_BYTES, output_field=IntegerField())
    for name in fields:
        column = queryset.model._meta.get_field(name)
        text = Cast(name, TextField()) if isinstance(column, JSONField) else F(name)
        size = size + Coalesce(ByteLength(text), 0)  # a null result or error: nothing
    rows = queryset.prefetch_related(None).values("pk")[offset:offset + limit]
    return (queryset.filter(pk__in=rows)
            .annotate(row_in_page=Window(RowNumber(), order_by=ordering),
                      bytes_through=Window(Sum(size), order_by=ordering, frame=RowRange(start=None, end=0)))
            # bytes_through: the row's and those before it. The first row, whatever its size.
            .filter(Q(row_in_page=1) | Q(bytes_through__lte=budget)))
