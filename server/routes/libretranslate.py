"""LibreTranslate-compatible endpoints: ``POST /translate``, ``GET|POST /languages``,
``POST /detect``, and what its web front end reads: ``GET /frontend/settings``, ``POST
/suggest`` (file translation: ``routes.files``).

Bodies may be JSON, ``application/x-www-form-urlencoded`` (what ``libretranslatepy`` sends) or
``multipart/form-data`` (what LibreTranslate's web page sends: a ``FormData``; file parts are
ignored, as LibreTranslate ignores them outside ``/translate_file``). A form's CRLF line
breaks are read as LF, as LibreTranslate reads them.
Fields of ``/translate``: ``q`` (string or list), ``source`` (code or ``auto``), ``target``,
``format`` (``text`` or ``html``), ``alternatives`` (int), ``api_key``.
Errors are ``{"error": "<message>", "details": {"code": ..., ...}}`` with the usual status.
With ``format=html`` the text nodes are translated and tags, comments, ``<script>`` and
``<style>`` contents are kept as they are.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Annotated, TypeVar, get_args
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException

from ..auth import Caller, admit, anonymous_allowed, caller_of, key_from_request
from ..bundles import language_name
from ..dependencies import ServiceDep, StateDep
from ..documents import FORMATS
from ..errors import ApiError, bad_request
from ..request_texts import request_terms, translate_texts
from ..results import TextResult
from ..schemas import (
    LT_DETECT_ERRORS,
    LT_TRANSLATE_ERRORS,
    JSONObject,
    LTDetected,
    LTDetectRequest,
    LTErrorResponse,
    LTFrontendLanguages,
    LTFrontendSettings,
    LTLanguage,
    LTNamedLanguage,
    LTTranslateRequest,
    LTTranslateResponse,
)
from ..service import TranslationService

router = APIRouter(tags=["LibreTranslate compatible"])


BODY_TYPES = ("application/json", "application/x-www-form-urlencoded", "multipart/form-data")


async def _multipart_fields(request: Request) -> JSONObject:
    """The text parts of a multipart form (read from the body already read); a repeated name
    gives a list, as in a urlencoded form."""
    try:
        form = await request.form()
    except (MultiPartException, HTTPException) as exc:
        reason = getattr(exc, "detail", None) or getattr(exc, "message", None) or str(exc)
        raise bad_request(
            "malformed_body", f"The multipart body cannot be read ({reason})."
        ) from None
    try:
        values: dict[str, list[str]] = {}
        for k, v in form.multi_items():
            if isinstance(v, str):
                values.setdefault(k, []).append(v)
    finally:
        await form.close()
    return {k: _lf(v[0]) if len(v) == 1 else [_lf(x) for x in v] for k, v in values.items()}


def _lf(value: str) -> str:
    """A form field's line breaks as LF: a browser sends a form's line breaks as CRLF (the
    HTML form encodings), so a text would count more characters than its box showed and its
    page limited it to. LibreTranslate reads form fields so too."""
    return value.replace("\r\n", "\n")


async def read_fields(request: Request) -> JSONObject:
    body = await request.body()
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    fields: JSONObject = {}
    if ctype == "application/json":
        try:
            data = json.loads(body or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise bad_request(
                "malformed_json", f"The request body is not valid JSON ({exc})."
            ) from None
        except RecursionError:
            raise bad_request(
                "malformed_json", "The JSON body is nested too deeply for a translate request."
            ) from None
        if not isinstance(data, dict):
            raise bad_request("malformed_json", "The JSON body must be an object.")
        fields.update(data)
    elif ctype in ("", "application/x-www-form-urlencoded"):
        try:
            parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False)
        except UnicodeDecodeError:
            raise bad_request("malformed_body", "The form body is not UTF-8.") from None
        for k, v in parsed.items():
            fields[k] = _lf(v[0]) if len(v) == 1 else [_lf(x) for x in v]
    elif ctype == "multipart/form-data":
        fields.update(await _multipart_fields(request))
    else:
        raise ApiError(
            415,
            "unsupported_media_type",
            f"Content-Type {ctype!r} is not supported.",
            allowed=list(BODY_TYPES),
        )
    for name, value in request.query_params.multi_items():
        fields.setdefault(name, value)
    return fields


@dataclass(frozen=True)
class AuthenticatedFields:
    """A LibreTranslate request's fields and its caller (``server.auth``)."""

    fields: JSONObject
    caller: Caller


async def authenticated_fields(request: Request) -> AuthenticatedFields:
    """Dependency: the body's fields, once the client is identified. A key in a header is
    checked before the body is parsed; a key in the body (``api_key``, as LibreTranslate
    clients send it) after. A body that cannot be parsed from a client with no header key
    answers 401 when keys are required: an unauthenticated client learns nothing about
    parsing."""
    header_key = key_from_request(request)
    caller = await caller_of(request, header_key) if header_key is not None else None
    try:
        fields = await read_fields(request)
    except ApiError:
        if caller is None:
            await caller_of(request, None)
        raise
    if caller is None:
        body_key = fields.get("api_key")
        given = body_key if isinstance(body_key, str) and body_key else None
        caller = await caller_of(request, given)
    return AuthenticatedFields(fields, caller)


Fields = Annotated[AuthenticatedFields, Depends(authenticated_fields)]


def request_body(model: type[BaseModel]) -> JSONObject:
    """OpenAPI request body of a LibreTranslate endpoint: the model, as JSON, as a form
    or a multipart form (``server.openapi`` adds the model to the components)."""
    schema = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {
        "requestBody": {
            "required": True,
            "content": {ctype: {"schema": schema} for ctype in BODY_TYPES},
        }
    }


# What each field must be, for error messages (the models in schemas.py enforce it).
_FIELD_RULES = {
    "q": "a string or a list of strings",
    "source": "a language code or 'auto'",
    "target": "a language code",
    "format": "'text' or 'html'",
    "alternatives": "an integer >= 0",
    "api_key": "a string",
}
BodyModel = TypeVar("BodyModel", bound=BaseModel)


def parse_fields(model: type[BodyModel], fields: JSONObject) -> BodyModel:
    """The fields of a JSON or form body, validated by ``model``; the first problem answers
    400 in LibreTranslate's error shape, naming the field and what it must be."""
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        e = exc.errors()[0]
        name = str(e["loc"][0]) if e["loc"] else "body"
        if e["type"] == "missing":
            raise bad_request(
                "missing_field", f"Field {name!r} is required.", parameter=name
            ) from None
        extra: JSONObject = {}
        if e["type"] == "literal_error":
            extra["allowed"] = list(get_args(model.model_fields[name].annotation))
        rule = _FIELD_RULES.get(name, "valid")
        raise bad_request(
            "invalid_field",
            f"Field {name!r} must be {rule} ({e['msg']}).",
            parameter=name,
            **extra,
        ) from None


@router.post(
    "/translate",
    summary="Translate (LibreTranslate compatible)",
    responses={200: {"model": LTTranslateResponse}, **LT_TRANSLATE_ERRORS},
    response_model_exclude_none=True,  # a field is present when it applies (the model's doc)
    openapi_extra=request_body(LTTranslateRequest),
)
async def lt_translate(
    authenticated: Fields, state: StateDep, service: ServiceDep
) -> LTTranslateResponse:
    req = parse_fields(LTTranslateRequest, authenticated.fields)
    client = authenticated.caller.subject
    single = isinstance(req.q, str)
    texts: list[str] = [req.q] if isinstance(req.q, str) else list(req.q)
    source, target = req.source, req.target
    # A text of spaces or line breaks only is answered as it is, as LibreTranslate answers it:
    # its web page sends what is in its box once typing pauses, a lone line break included, and
    # an error would replace the page's whole form. An empty text is still refused.
    service.validate_texts(texts, blank_ok=True)
    opts = service.validate_options(None, req.alternatives, None)
    caller = authenticated.caller
    terms = await request_terms(state, caller, source, target, req.glossary, req.do_not_translate)
    await admit(state, authenticated.caller, sum(len(t) for t in texts))
    deadline = time.monotonic() + state.settings.request_timeout_s
    html = req.format == "html"
    filled = [i for i, t in enumerate(texts) if t.strip()]
    if filled:
        done = await translate_texts(
            service, [texts[i] for i in filled], source, target, opts, None, html, terms,
            deadline, client,
        )  # fmt: skip
    else:
        service.validate_languages(source, target, None)
        done = []
    by_index = dict(zip(filled, done, strict=True))
    translated = [by_index.get(i) or TextResult(text=t, source=source) for i, t in enumerate(texts)]
    # an HTML document is detected whole: it has a detected language only if it had text; a
    # blank text has none
    detected = [_detected(r, i in by_index and (r.detected_confidence is not None if html
                                                else source == "auto"))
                for i, r in enumerate(translated)]  # fmt: skip
    alternatives = [[a.text for a in r.alternatives] for r in translated]
    if single:
        return LTTranslateResponse(
            translatedText=translated[0].text,
            detectedLanguage=detected[0],
            alternatives=alternatives[0] or None,
        )
    return LTTranslateResponse(
        translatedText=[r.text for r in translated],
        detectedLanguage=detected if source == "auto" else None,
        alternatives=alternatives if req.alternatives else None,
    )


def _detected(r: TextResult, auto: bool) -> LTDetected | None:
    if not auto:
        return None
    percent = round(100.0 * (r.detected_confidence or 0.0), 2)
    return LTDetected(confidence=percent, language=r.source)


def _languages(service: TranslationService) -> list[LTLanguage]:
    return [
        LTLanguage(code=c, name=language_name(c), targets=service.catalogue.targets_for(c))
        for c in service.catalogue.languages
    ]


_LANGUAGES_SUMMARY = "Languages (LibreTranslate compatible)"


@router.get("/languages", summary=_LANGUAGES_SUMMARY, response_model=list[LTLanguage])
async def lt_languages_get(service: ServiceDep) -> list[LTLanguage]:
    return _languages(service)


@router.post("/languages", summary=_LANGUAGES_SUMMARY, response_model=list[LTLanguage])
async def lt_languages_post(service: ServiceDep) -> list[LTLanguage]:
    return _languages(service)


@router.post(
    "/detect",
    summary="Detect language (LibreTranslate compatible)",
    responses={200: {"model": list[LTDetected]}, **LT_DETECT_ERRORS},
    openapi_extra=request_body(LTDetectRequest),
)
async def lt_detect(authenticated: Fields, service: ServiceDep) -> JSONResponse:
    req = parse_fields(LTDetectRequest, authenticated.fields)
    if not req.q.strip():
        raise bad_request("empty_text", "Field 'q' must be a non-empty string.", parameter="q")
    service.validate_texts([req.q])  # length, valid Unicode: the rules of /v1/translate
    return JSONResponse(
        [
            {"confidence": round(100 * c, 2), "language": lang}
            for lang, c in service.detection.detect_any(req.q)
        ]
    )


# Front-end settings: what LibreTranslate's web page reads at start. Suggestions are not taken
# here: the page then hides that control.
FRONTEND_TIMEOUT_MS = 500  # LibreTranslate's default: the page translates 0.5 s after typing


@router.get(
    "/frontend/settings",
    summary="Front-end settings (LibreTranslate compatible)",
    response_model=LTFrontendSettings,
)
async def lt_frontend_settings(state: StateDep, service: ServiceDep) -> LTFrontendSettings:
    settings = state.settings
    languages = service.catalogue.languages
    target = "en" if "en" in languages else (languages or ["en"])[0]
    return LTFrontendSettings(
        charLimit=settings.max_chars_per_text,
        frontendTimeout=FRONTEND_TIMEOUT_MS,
        apiKeys=bool(settings.api_keys) or settings.keys_db is not None,
        keyRequired=not anonymous_allowed(state),
        suggestions=False,
        filesTranslation=True,
        supportedFilesFormat=list(FORMATS),
        language=LTFrontendLanguages(
            source=LTNamedLanguage(code="auto", name="Auto Detect"),
            target=LTNamedLanguage(code=target, name=language_name(target)),
        ),
    )


@router.post(
    "/suggest",
    summary="Suggest a translation (LibreTranslate compatible; suggestions are not taken)",
    responses={403: {"model": LTErrorResponse, "description": "Suggestions are disabled."}},
)
async def lt_suggest() -> None:
    raise ApiError(403, "suggestions_disabled", "Suggestions are disabled on this server.")
