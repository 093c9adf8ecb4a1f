"""Every list is paginated with DRF's limit/offset pagination (SPEC §8): ``?limit=&offset=``,
100 by default, at most 1000 (a larger limit is cut down to 1000), answered as
``count/next/previous/results``.

Unlike DRF's, a ``limit`` or ``offset`` that is not a number of the documented range is a 400
``invalid_parameters`` rather than silently replaced by the default: the client asked for
something else than it gets.
"""

import re

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination

_DIGITS = re.compile(r"[0-9]+")


class Pagination(LimitOffsetPagination):
    default_limit = 100
    max_limit = 1000

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
