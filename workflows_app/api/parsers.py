"""The one parser of the API: JSON. A body that is not JSON is a 400 ``parse_error`` whatever is
wrong with it, a charset it cannot be read in included. DRF's JSONParser lets nesting deep enough
to exhaust the recursion limit through as a RecursionError (a 500), and turns a number too large
for a float (``1e400``) into infinity, which neither a JSON response nor PostgreSQL can hold.
"""

import codecs

from django.conf import settings
from django.utils.http import parse_header_parameters
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser, get_encoding

from workflows_app import values


class StrictJSONParser(JSONParser):
    """JSON, strictly (``values.loads``): no NaN/Infinity, no number that overflows a float,
    bounded nesting; in the charset the ``Content-Type`` names (``DEFAULT_CHARSET`` when it names none)."""

    def parse(self, stream, media_type=None, parser_context=None):
        # Refuses a charset that is unknown (charset=bogus) or not a text encoding (bz2_codec).
        encoding = get_encoding({"encoding": charset(media_type, parser_context)})
        try:
            return values.loads(codecs.getreader(encoding)(stream))
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an int of too many digits, too deep
            raise ParseError(f"JSON parse error - {exc}") from None


def charset(media_type, parser_context=None) -> str:
    """The charset the request's ``Content-Type`` names, as it names it, else the request's
    encoding (``DEFAULT_CHARSET``). Not Django's ``request.encoding``: it drops a charset that
    ``codecs`` does not know (``charset=bogus``), and the body would be read as UTF-8 when the
    client said it is not."""
    _, params = parse_header_parameters(media_type or "")
    named = params.get("charset")
    if named is not None:
        return named[:100]
    return (parser_context or {}).get("encoding") or settings.DEFAULT_CHARSET
