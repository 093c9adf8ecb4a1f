"""The REST API under ``/api/v1/`` (SPEC §8): DRF views that parse, call one service
(``workflows_app.services``) and translate its errors.

One concept per module: ``serializers`` (what goes in and out), ``fields`` (strict JSON
types), ``parsers`` (JSON only, refused when it cannot be stored), ``filters`` (django-filter
FilterSets), ``pagination``, ``permissions``, ``negotiation``, ``errors`` (the error classes and the one
exception handler), ``schema`` (OpenAPI annotations shared by the views), ``views``,
``docs`` (the browsable documentation page) and ``urls``.
"""
