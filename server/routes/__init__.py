"""The app's routers, one per group of endpoints (its OpenAPI tag):

- ``translate``: ``POST /v1/translate``
- ``catalogue``: ``GET /v1/languages``, ``GET /v1/models``
- ``operations``: ``GET /healthz``, ``/readyz``, ``/metrics``
- ``libretranslate``: ``POST /translate``, ``GET|POST /languages``, ``POST /detect``,
  ``GET /frontend/settings``, ``POST /suggest``
- ``files``: ``POST /translate_file``, ``GET /download_file/{name}`` (LibreTranslate)
- ``admin``: ``POST /v1/admin/reload`` (behind the admin keys)

The web page's router is ``server.web.router``. ``server.app.create_app`` includes them in
this order (the OpenAPI document lists operations in it).
"""
