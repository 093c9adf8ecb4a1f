"""The one parser of the API: JSON. A body that is not JSON is a 400 ``parse_error`` whatever is
wrong with it. DRF's JSONParser lets nesting deep enough to exhaust the recursion limit through
as a RecursionError (a 500), and turns a number too large for a float (``1e400``) into
infinity, which neither a JSON response nor PostgreSQL can hold.
"""

import codecs
import json
import math

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding


def _finite_float(text):
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number out of range: {text[:40]}")
    return value


def _refuse_constant(name):
    raise ValueError(f"{name} is not valid JSON")


class StrictJSONParser(JSONParser):
    """JSON, strictly: no NaN/Infinity, no number that overflows a float, bounded nesting."""

    def parse(self, stream, media_type=None, parser_context=None):
        encoding = get_encoding(parser_context or {})  # refuses unknown and non-text charsets
        try:
            return json.load(codecs.getreader(encoding)(stream), parse_constant=_refuse_constant,
                             parse_float=_finite_float)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an int of too many digits
            raise ParseError(f"JSON parse error - {exc}") from None
