"""The one parser of the API: JSON. A body that is not JSON is a 400 ``parse_error`` whatever is
wrong with it. DRF's JSONParser lets nesting deep enough to exhaust the recursion limit through
as a RecursionError (a 500), and turns a number too large for a float (``1e400``) into
infinity, which neither a JSON response nor PostgreSQL can hold.
"""

import codecs

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding

from workflows_app import values


class StrictJSONParser(JSONParser):
    """JSON, strictly (``values.loads``): no NaN/Infinity, no number that overflows a float,
    bounded nesting."""

    def parse(self, stream, media_type=None, parser_context=None):
        encoding = get_encoding(parser_context or {})  # refuses unknown and non-text charsets
        try:
            return values.loads(codecs.getreader(encoding)(stream))
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an int of too many digits, too deep
            raise ParseError(f"JSON parse error - {exc}") from None
