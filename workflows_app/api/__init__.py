"""The REST API under ``/api/v1/``, or wherever a host project includes
``workflows_app.api.urls``: DRF views that parse, call one service
(``workflows_app.services``) and translate its errors.

One concept per module: ``base`` (the base of every view: its authentication, permissions,
pagination, errors..., from ``drf_settings``, never the host's ``REST_FRAMEWORK``), ``routes``
(the endpoints other apps add: ``agents``), ``serializers`` (what goes in and out), ``fields``
(strict JSON types), ``parsers`` (JSON only, refused when it cannot be stored), ``renderers``
(JSON out), ``filters`` (django-filter FilterSets), ``pagination``, ``permissions``,
``negotiation``, ``errors`` (the error classes and the one exception handler), ``schema`` (the
schema's generation, with drf-spectacular settings of its own, and the OpenAPI annotations
shared by the views), ``views``, ``docs`` (the browsable documentation page) and ``urls``.
"""
