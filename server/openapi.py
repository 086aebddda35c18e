"""The OpenAPI document, true to this server's configuration.

FastAPI builds it from the routes and models; this adds what it cannot know: the
LibreTranslate request models (their endpoints read JSON or forms by hand, so no route
parameter names them) and the ranges that come from settings (text length, list size, beam
size, alternatives, output length), so that generated clients and schema fuzzers see the
limits the service enforces.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel

from .schemas import LTDetectRequest, LTTranslateRequest
from .settings import Settings

# Request models referenced by ``$ref`` only (see routes.libretranslate.request_body).
REFERENCED_MODELS: tuple[type[BaseModel], ...] = (LTTranslateRequest, LTDetectRequest)
# The document or a part of it, as FastAPI types it (``get_openapi``, ``FastAPI.openapi``).
OpenAPIObject = dict[str, Any]
# JSON Schema keywords of one JSON type: bounds, and an array's ``items`` keywords.
Keywords = Mapping[str, int | Mapping[str, int]]
ByType = Mapping[str, Keywords]  # JSON type ("string", "array", ...) -> its keywords


def configured_ranges(s: Settings) -> dict[str, dict[str, ByType]]:
    """Component -> property -> JSON type -> keywords. A text must also hold a non-space
    character, which the schema does not say (the 400 ``empty_text`` does)."""
    text = {"minLength": 1, "maxLength": s.max_chars_per_text}
    texts: ByType = {
        "string": text,
        "array": {"minItems": 1, "maxItems": s.max_texts, "items": text},
    }
    alternatives: ByType = {"integer": {"minimum": 0, "maximum": s.max_alternatives}}
    return {
        "TranslateRequest": {
            "text": texts,
            "beam_size": {"integer": {"minimum": 1, "maximum": s.max_beam_size}},
            "num_alternatives": alternatives,
            "max_length": {"integer": {"minimum": 1, "maximum": s.max_length_limit}},
        },
        "LTTranslateRequest": {"q": texts, "alternatives": alternatives},
        "LTDetectRequest": {"q": {"string": text}},
    }


def _constrain(prop: OpenAPIObject, by_type: ByType) -> None:
    for branch in prop.get("anyOf", [prop]):
        keywords = by_type.get(branch.get("type"))
        if not keywords:
            continue
        for key, value in keywords.items():
            if isinstance(value, Mapping):  # an array's items
                branch.setdefault(key, {}).update(value)
            else:
                branch[key] = value


def build_openapi(app: FastAPI, settings: Settings) -> OpenAPIObject:
    schema = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for model in REFERENCED_MODELS:
        model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        components.update(model_schema.pop("$defs", {}))
        components[model.__name__] = model_schema
    for component, props in configured_ranges(settings).items():
        for name, by_type in props.items():
            _constrain(components[component]["properties"][name], by_type)
    return schema


def install_openapi(app: FastAPI, settings: Settings) -> None:
    def openapi() -> OpenAPIObject:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app, settings)
        return app.openapi_schema

    # FastAPI's documented way to give an app its own OpenAPI document
    app.openapi = openapi  # type: ignore[method-assign]
