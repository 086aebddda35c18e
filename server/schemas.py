"""Request and response models of the ``/v1`` API and of the LibreTranslate-compatible
endpoints (they also drive the OpenAPI document).

Ranges that depend on settings (beam size, alternatives, max length, sizes) are checked by the
service so the error can name the configured limits; ``server.openapi`` writes the configured
ranges into the document.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict

from lsmt_bundle.packages import ModelKind

from .output_checks import Flag


def _not_a_bool(value: object) -> object:
    if isinstance(value, bool):  # Python's bool is an int: say no before pydantic says yes
        raise ValueError("must be an integer, not a boolean")
    return value


# A JSON object as it is read or answered where no model gives its shape (error bodies, form
# and JSON fields before validation, the OpenAPI document).
JSONObject = dict[str, object]

# /v1 takes JSON numbers only: a boolean or "2" is not a beam size.
JsonInt = Annotated[int, Strict()]
# LibreTranslate clients send forms, where every value is text: "2" is 2, a boolean is not.
FormInt = Annotated[int, BeforeValidator(_not_a_bool)]


HTML_FORMAT = (
    "html: the text is an HTML document or fragment; each block is translated as one text with "
    "its inline elements (b, i, a, span, code...) kept around the words they covered; script, "
    'style, pre, code and translate="no" are kept as they are; alt, title, placeholder and '
    "aria-label are translated."
)


GLOSSARY = (
    "Source term -> the target term it must become (case-insensitive in the source, whole "
    "words; written as given, capitalised at a capitalised word; not inflected)."
)
DO_NOT_TRANSLATE = "Terms written as they are in the translation (names, products, code)."


class TranslateRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"text": "Hello world. How are you?", "source": "en", "target": "de"},
                {
                    "text": ["Guten Morgen.", "Bonjour."],
                    "source": "auto",
                    "target": "en",
                    "num_alternatives": 2,
                },
            ]
        },
    )

    text: str | list[str] = Field(description="One text or a list of texts.")
    source: str = Field("auto", description="Source language code, or auto (per text).")
    target: str = Field(description="Target language code.")
    beam_size: JsonInt | None = Field(None, description="Beam size (server default when omitted).")
    num_alternatives: JsonInt = Field(0, description="Alternative translations per text.")
    max_length: JsonInt | None = Field(None, description="Maximum tokens per translated sentence.")
    model: str | None = Field(None, description="Bundle name; default: first that has the route.")
    format: Literal["text", "html"] = Field("text", description=HTML_FORMAT)
    glossary: dict[str, str] | None = Field(None, description=GLOSSARY)
    do_not_translate: list[str] | None = Field(None, description=DO_NOT_TRANSLATE)


class DetectedLanguage(BaseModel):
    language: str
    confidence: float = Field(
        description="The language identifier's probability of this language, 0..1, over every "
        "language it knows (not renormalised over the served ones)."
    )


class Alternative(BaseModel):
    text: str
    score: float = Field(description="Mean over sentences of the length-normalised log-prob.")


class Translation(BaseModel):
    text: str
    source: str = Field(description="Source language used (given or detected).")
    detected: DetectedLanguage | None = Field(None, description="Set when source was auto.")
    score: float | None = None
    alternatives: list[Alternative] = Field(default_factory=list)
    engine: str | None = Field(
        None,
        description="Engine key that served it (through a pivot: the second leg's, into the "
        "target); null when the text was already in the target language and returned "
        "unchanged.",
    )
    pivot: str | None = Field(
        None,
        description="Set when no model translates the pair directly: the language the text "
        "was translated through (source -> pivot -> target).",
    )
    warnings: list[Flag] = Field(
        default_factory=list,
        description="What may be wrong with this translation: repetition (the output repeats "
        "itself more than the source), length_ratio (far longer or shorter than the source), "
        "off_target (not in the target language), uncertain_language (auto: the source "
        "language was not identified with confidence). Empty when nothing was found; a "
        "flagged sentence has already been decoded a second time.",
    )


class TranslateResponse(BaseModel):
    translations: list[Translation]
    target: str
    model: str | None = Field(None, description="Bundle(s) that served the request.")
    request_id: str | None = None


class LanguageInfo(BaseModel):
    code: str
    name: str
    targets: list[str] = Field(description="Every target, direct or through a pivot.")
    pivots: dict[str, str] = Field(
        default_factory=dict,
        description="The targets reached only through a pivot language, and which.",
    )


class ModelSource(BaseModel):
    kind: ModelKind = Field(
        description="lsmt: an LSMT bundle; argos: an Argos Translate package; ctranslate2: a "
        "CTranslate2 model folder."
    )
    provenance: dict[str, str] = Field(
        default_factory=dict, description="What the model says of itself (version, licence...)."
    )


class LanguagesResponse(BaseModel):
    languages: list[LanguageInfo]
    routes: list[str]
    served_by: dict[str, str] = Field(
        description="Each route's model when a request names none (the first in LSMT_BUNDLES "
        "that offers it); a request's model field pins another."
    )
    models: dict[str, ModelSource] = Field(description="Every served model: what it is.")
    auto_detect: list[str] = Field(
        description="Served languages that source auto can resolve to (the identifier knows "
        "more: a text in a language not served is refused with unsupported_language)."
    )


class ErrorBody(BaseModel):
    code: str
    message: str
    model_config = ConfigDict(extra="allow")


class ErrorResponse(BaseModel):
    error: ErrorBody
    request_id: str | None = None


EngineState = Literal["unloaded", "loading", "loaded", "host", "failed"]


class EngineInfo(BaseModel):
    key: str = Field(description="Engine key: one engine serves these routes.")
    bundle: str
    routes: list[str]
    state: EngineState = Field(description="host: parked in host memory (CUDA).")
    device: str | None
    bytes: int = Field(description="Bytes the device budget counts: its bulk twin's included.")
    bulk_twin_bytes: int = Field(
        0,
        description="CPU: bytes of its bulk twin, the niced second translator its documents' "
        "batches run on while short requests share the route (0: none open).",
    )
    last_used: str | None = Field(description="ISO 8601 time, UTC.")
    load_seconds: float | None
    loads: int
    failures: int
    in_flight_batches: int
    error: str | None
    retry_in_s: float | None = Field(description="Failed engines: time until the next try.")
    replica: str | None = Field(
        None,
        description="The cluster's translator replica holding it (a key may be held by "
        "several); absent on a single server.",
    )

    @classmethod
    def unloaded(cls, key: str, bundle: str, routes: list[str]) -> EngineInfo:
        """A key that no engine serves now (never asked for, or dropped)."""
        return cls(
            key=key,
            bundle=bundle,
            routes=routes,
            state="unloaded",
            device=None,
            bytes=0,
            last_used=None,
            load_seconds=None,
            loads=0,
            failures=0,
            in_flight_batches=0,
            error=None,
            retry_in_s=None,
        )


class BundleInfo(BaseModel):
    name: str
    kind: ModelKind
    provenance: dict[str, str]
    languages: list[str]
    routes: list[str]
    engine_keys: list[str]
    max_source_positions: int


class ModelsResponse(BaseModel):
    device: str
    compute_type: str
    budgets: dict[str, int] = Field(
        description="device_bytes, host_bytes: of this process (on the cluster: of each "
        "translator replica)."
    )
    used: dict[str, int] = Field(
        description="device_bytes, host_bytes (on the cluster: every translator's together)."
    )
    bundles: list[BundleInfo]
    disabled: dict[str, str] = Field(
        description="Ready models (packages) that could not be opened, and why: their routes "
        "are not served."
    )
    engines: list[EngineInfo]


class BundleReload(BaseModel):
    name: str
    status: Literal["unchanged", "reloaded", "refused"]
    reason: str | None = Field(None, description="Why a bundle was refused (it is still served).")
    added_languages: list[str] = Field(default_factory=list)
    added_routes: list[str] = Field(default_factory=list)


class ReloadResponse(BaseModel):
    bundles: list[BundleReload]


class GlossaryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    glossary: dict[str, str] | None = Field(None, description=GLOSSARY)
    do_not_translate: list[str] | None = Field(None, description=DO_NOT_TRANSLATE)


class GlossariesResponse(BaseModel):
    name: str = Field(description="The API key's name.")
    glossaries: dict[str, dict[str, str]] = Field(
        description="By pair (source-target): each term and what it becomes (itself: kept)."
    )


class HealthResponse(BaseModel):
    status: Literal["ok"]
    uptime_s: float


class WarmupState(BaseModel):
    done: bool
    routes: list[str]
    errors: dict[str, str]


class ReadinessResponse(BaseModel):
    status: Literal["ready", "degraded", "not_ready"]
    ready: bool = Field(description="False (and status 503) until bundles and warm-up are OK.")
    problems: list[str]
    bundles: dict[str, str]
    warmup: WarmupState
    failed_engines: dict[str, str | None]
    damaged_files: dict[str, dict[str, str]]
    disabled_models: dict[str, str] = Field(
        description="Packages that could not be opened, and why (status degraded, still ready)."
    )


# LibreTranslate-compatible endpoints -------------------------------------------------------


class LTTranslateRequest(BaseModel):
    """Body of ``POST /translate``, as JSON or as a form (where ``q`` may repeat)."""

    model_config = ConfigDict(
        extra="ignore",  # LibreTranslate ignores fields it does not know; so do we
        json_schema_extra={
            "examples": [{"q": "Hello world.", "source": "en", "target": "de", "format": "text"}]
        },
    )

    q: str | list[str] = Field(description="Text, or list of texts, to translate.")
    source: str = Field("auto", description="Source language code, or auto.")
    target: str = Field(description="Target language code.")
    format: Literal["text", "html"] = Field("text", description=HTML_FORMAT)
    glossary: dict[str, str] | None = Field(None, description=GLOSSARY)
    do_not_translate: list[str] | None = Field(None, description=DO_NOT_TRANSLATE)
    alternatives: FormInt = Field(0, ge=0, description="Alternative translations per text.")
    api_key: str | None = Field(None, description="API key (or send it in a header).")


class LTDetectRequest(BaseModel):
    """Body of ``POST /detect``, as JSON or as a form."""

    model_config = ConfigDict(extra="ignore")

    q: str = Field(description="Text whose language to detect.")
    api_key: str | None = Field(None, description="API key (or send it in a header).")


class LTDetected(BaseModel):
    confidence: float = Field(ge=0, le=100, description="Percent.")
    language: str


class LTTranslateResponse(BaseModel):
    """A single ``q`` gets single values; a list gets lists in the same order."""

    translatedText: str | list[str]  # LibreTranslate's field names (camelCase)
    detectedLanguage: LTDetected | list[LTDetected | None] | None = Field(
        None, description="Present when source was auto."
    )
    alternatives: list[str] | list[list[str]] | None = Field(
        None, description="Present when alternatives > 0."
    )


class LTLanguage(BaseModel):
    code: str
    name: str
    targets: list[str]


class LTNamedLanguage(BaseModel):
    code: str
    name: str


class LTFrontendLanguages(BaseModel):
    source: LTNamedLanguage
    target: LTNamedLanguage


class LTFrontendSettings(BaseModel):
    """What LibreTranslate's web front end reads before it starts (its field names)."""

    charLimit: int = Field(description="Characters per text; -1: no limit.")
    frontendTimeout: int = Field(description="Milliseconds the page waits after typing.")
    apiKeys: bool = Field(description="Whether API keys are in use.")
    keyRequired: bool = Field(description="Whether a request needs a key.")
    suggestions: bool = Field(description="Whether /suggest takes suggestions (never here).")
    filesTranslation: bool = Field(description="Whether /translate_file takes files.")
    supportedFilesFormat: list[str]
    language: LTFrontendLanguages


class LTFileResponse(BaseModel):
    translatedFileUrl: str = Field(description="Where the translated file can be downloaded.")


class LTErrorResponse(BaseModel):
    error: str = Field(description="What was wrong and what is allowed.")
    details: ErrorBody
    request_id: str | None = None


def _errors(model: type[BaseModel], described: dict[int, str]) -> dict[int | str, JSONObject]:
    return {status: {"model": model, "description": d} for status, d in described.items()}


# Failures every endpoint that reads a body can answer, before it looks at the body.
_BODY_ERRORS = {
    401: "API key missing.",
    403: "API key invalid.",
    408: "The request body stopped arriving.",
    413: "Text or request too large.",
    431: "Request headers too large.",
}
_TRANSLATE_ERRORS = {
    400: "Bad request (language, route, parameters, malformed body).",
    **_BODY_ERRORS,
    429: "Queue full; see Retry-After.",
    503: "Engine unavailable or shutting down; see Retry-After.",
    504: "Timed out.",
}
ERROR_RESPONSES = _errors(
    ErrorResponse, {**_TRANSLATE_ERRORS, 422: "Body does not match the schema."}
)
LT_TRANSLATE_ERRORS = _errors(
    LTErrorResponse, {**_TRANSLATE_ERRORS, 415: "Content-Type not JSON or form."}
)
LT_DETECT_ERRORS = _errors(
    LTErrorResponse,
    {
        400: "Bad request (missing or empty text, malformed body).",
        **_BODY_ERRORS,
        415: "Content-Type not JSON or form.",
    },
)
ADMIN_ERRORS = _errors(
    ErrorResponse,
    {
        401: "Admin key missing.",
        403: "Admin key invalid.",
        404: "No admin key configured (LSMT_ADMIN_KEYS): the endpoint is off.",
        408: "The request body stopped arriving.",
        413: "Request too large.",
        431: "Request headers too large.",
    },
)
