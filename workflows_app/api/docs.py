"""``GET /api/v1/docs``: the API's documentation as one HTML page, built from the OpenAPI schema
(``GET /api/v1/schema``) that drf-spectacular generates.

Why not Swagger UI or Redoc: drf-spectacular serves them from a CDN unless the
``drf-spectacular-sidecar`` package provides their files, and Switchyard must work on a
machine with no Internet access and without another dependency. So this page loads no asset
at all — no script, its little CSS inline — and lists every path, with its operations, their
parameters, request body, responses, and the schemas they refer to. It needs a logged-in user
like every endpoint: a browser that is not logged in (it asks for ``text/html``) is sent to the
admin's login page, which brings it back here after (``?next=``); any other client gets the 401
(a page that links to the login, or for a client that asks for JSON, the API's JSON error).
"""

import re
from pathlib import Path
from urllib.parse import urlencode

from django.http import HttpResponseRedirect
from django.template import Context, Engine
from django.urls import NoReverseMatch, reverse
from django.utils.cache import patch_vary_headers
from django.utils.html import escape
from django.utils.http import parse_header_parameters
from django.utils.safestring import mark_safe
from drf_spectacular.views import SpectacularAPIView
from rest_framework.exceptions import NotAcceptable, NotAuthenticated
from rest_framework.renderers import BaseRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from workflows_app.api.base import SwitchyardView
from workflows_app.api.renderers import SCHEMA_RENDERERS, JSONRenderer
from workflows_app.api.schema import SchemaGenerator, extend_schema, mount_prefix, switchyard_spectacular_settings

_ENGINE = Engine(dirs=[str(Path(__file__).resolve().parent / "templates")], autoescape=True)
_METHODS = ("get", "post", "put", "patch", "delete")


class DocsHTMLRenderer(BaseRenderer):
    """Renders an OpenAPI schema (or an error of the docs view) as the documentation page."""

    media_type = "text/html"
    format = "html"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        context = renderer_context or {}
        response = context.get("response")
        if response is not None and response.status_code >= 400:
            login = None
            if response.status_code == 401:
                login = _login_url(context.get("request"))
            return _ENGINE.get_template("docs_error.html").render(Context({
                "status": response.status_code, "error": data, "login": login}))
        return _ENGINE.get_template("docs.html").render(Context({
            **page(data), "schema_url": reverse("api:schema"), "prefix": mount_prefix(context.get("request"))}))


def _login_url(request=None):
    """The admin's login page, back to the docs after (the page the request asked for); None when
    the host project has no admin."""
    try:
        login = reverse("admin:login")
    except NoReverseMatch:
        return None
    return f"{login}?{urlencode({'next': request.path if request is not None else reverse('api:docs')})}"


def _asks_for_html(request) -> bool:
    """Whether the client names ``text/html`` in its ``Accept`` header, as a browser does (not
    only ``*/*``, as a command-line client does)."""
    for item in request.META.get("HTTP_ACCEPT", "").split(","):
        media_type, params = parse_header_parameters(item)
        if media_type == "text/html":
            try:
                return float(params.get("q", 1)) > 0
            except ValueError:
                return False
    return False


class SchemaView(SwitchyardView, SpectacularAPIView):
    """``GET /api/v1/schema``: the OpenAPI 3 schema, YAML by default (``?format=json`` or
    ``Accept: application/vnd.oai.openapi+json`` for JSON). Its errors are JSON like every
    other error of the API, not a YAML document.

    drf-spectacular's view takes its renderers, permissions, authentication, URLconf and
    generator from the host's ``SPECTACULAR_SETTINGS`` (``SERVE_...``): each is set here."""

    renderer_classes = SCHEMA_RENDERERS
    generator_class = SchemaGenerator
    serve_public = True
    urlconf = None
    patterns = None
    api_version = None
    custom_settings = None

    @extend_schema(exclude=True)
    def get(self, request, *args, **kwargs):
        # Around the response too: its file name is the schema's title.
        with switchyard_spectacular_settings(request):
            return super().get(request, *args, **kwargs)

    def _get_version_parameter(self, request):
        return request.GET.get("version")  # any: Switchyard's API has no ALLOWED_VERSIONS (DRF's setting)

    def handle_exception(self, exc):
        response = super().handle_exception(exc)
        self.request.accepted_renderer, self.request.accepted_media_type = JSONRenderer(), "application/json"
        return response


class DocsView(SwitchyardView, APIView):
    """``GET /api/v1/docs``: the documentation page (see the module's docstring). The page is
    HTML only; a client that asks for JSON gets the API's JSON errors — a 401 without
    credentials, a 406 ``not_acceptable`` with them (the schema as JSON is ``GET
    schema?format=json``)."""

    renderer_classes = [DocsHTMLRenderer, JSONRenderer]

    @extend_schema(exclude=True)
    def get(self, request, *args, **kwargs):
        if request.accepted_renderer.format != DocsHTMLRenderer.format:
            raise NotAcceptable(f"the documentation page is HTML; the schema as JSON: "
                                f"GET {mount_prefix(request)}schema?format=json")
        return Response(SchemaGenerator().get_schema(request=request, public=True))

    def handle_exception(self, exc):
        """A browser that is not logged in goes to the admin's login page, back here after."""
        if isinstance(exc, NotAuthenticated) and _asks_for_html(self.request):
            login = _login_url(self.request)
            if login is not None:
                response = HttpResponseRedirect(login)
                patch_vary_headers(response, ["Accept"])
                return response
        return super().handle_exception(exc)


def page(schema):
    """The template's context: the schema's operations and components in display form."""
    operations = []
    for path, item in schema.get("paths", {}).items():
        for method in _METHODS:
            if method in item:
                operations.append(_operation(path, method, item[method]))
    components = [
        {"name": name, "description": _text(s.get("description")), "enum": s.get("enum"),
         "properties": [_property(prop, sub, prop in part.get("required", ()))
                        for part in (s, *s.get("allOf", ())) for prop, sub in part.get("properties", {}).items()]}
        for name, s in sorted(schema.get("components", {}).get("schemas", {}).items())
    ]
    return {"info": schema.get("info", {}), "operations": operations, "components": components,
            "security": sorted(schema.get("components", {}).get("securitySchemes", {}))}


#: A line of a bulleted list in a description (drf-spectacular lists an enum's choices so).
_BULLET = re.compile(r"^\s*[*-]\s+")


def _text(markdown):
    """A description as HTML: the markdown the schema's descriptions use — paragraphs (blank
    lines between them), bulleted lists (``* item``) and ``code`` spans —, everything escaped."""
    html = []
    for block in re.split(r"\n\s*\n", (markdown or "").strip()):
        lines, prose = block.splitlines(), []
        items = [_BULLET.sub("", line) for line in lines if _BULLET.match(line)]
        prose = [line for line in lines if not _BULLET.match(line)]
        if prose:
            html.append(f"<p>{_inline(' '.join(prose))}</p>")
        if items:
            html.append("<ul>" + "".join(f"<li>{_inline(item)}</li>" for item in items) + "</ul>")
    return mark_safe("".join(html))


def _inline(text):
    return re.sub(r"``?([^`]+)``?", r"<code>\1</code>", escape(text))


def _operation(path, method, op):
    body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    return {
        "anchor": op.get("operationId", f"{method}-{path}"),
        "method": method.upper(), "path": path, "summary": op.get("summary", ""),
        "description": _text(op.get("description")),
        "parameters": [{"name": p["name"], "in": p["in"], "required": p.get("required", False),
                        "type": describe(p.get("schema", {})), "description": _text(p.get("description"))}
                       for p in op.get("parameters", [])],
        "body": describe(body) if body else None,
        "responses": [{"status": code, "description": _text(r.get("description")),
                       "type": describe(r.get("content", {}).get("application/json", {}).get("schema", {}))
                       if r.get("content") else None}
                      for code, r in op.get("responses", {}).items()],
    }


def _property(name, schema, required):
    return {"name": name, "required": required, "type": describe(schema),
            "read_only": schema.get("readOnly", False), "description": _text(schema.get("description"))}


def describe(schema):
    """A schema as ``{"text", "ref", "suffix"}``: a short type description, and the component it
    refers to (a link), if any; a discriminated ``oneOf``, or a choice between components, as
    ``"refs"``, a link to each variant."""
    suffix = " or null" if schema.get("nullable") else ""
    if "$ref" in schema:
        return {"text": "", "ref": schema["$ref"].rsplit("/", 1)[-1], "suffix": suffix}
    if schema.get("discriminator"):  # the start's body: one variant per workflow
        return {"text": f"one of, by {schema['discriminator']['propertyName']}: ", "ref": None, "suffix": suffix,
                "refs": [member["$ref"].rsplit("/", 1)[-1] for member in schema.get("oneOf", []) if "$ref" in member]}
    for combinator in ("oneOf", "anyOf"):  # a write's answer: its document, or an Acknowledgement
        members = schema.get(combinator) or []
        if len(members) > 1 and all("$ref" in member for member in members):
            return {"text": "one of: ", "ref": None, "suffix": suffix,
                    "refs": [member["$ref"].rsplit("/", 1)[-1] for member in members]}
    for combinator in ("allOf", "oneOf", "anyOf"):
        if schema.get(combinator):
            inner = describe(schema[combinator][0])
            return {**inner, "suffix": inner.get("suffix", "") + suffix}
    kind = schema.get("type")
    if kind == "array":
        inner = describe(schema.get("items", {}))
        return {**inner, "text": "array of " + inner["text"], "suffix": inner.get("suffix", "") + suffix}
    text = kind or "any JSON"
    if schema.get("format"):
        text += f" ({schema['format']})"
    if schema.get("enum"):
        text += ": one of " + ", ".join(str(v) for v in schema["enum"] if v is not None)
    bounds = [f"{word} {schema[key]}" for key, word in (("minimum", "≥"), ("maximum", "≤"),
                                                         ("maxLength", "max length")) if key in schema]
    if bounds:
        text += " (" + ", ".join(bounds) + ")"
    return {"text": text, "ref": None, "suffix": suffix}
