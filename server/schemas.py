"""Request and response models of the ``/v1`` API (they also drive the OpenAPI docs).

Ranges that depend on settings (beam size, alternatives, max length, sizes) are checked by the
service so the error can name the configured limits.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


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
    beam_size: int | None = Field(None, description="Beam size (server default when omitted).")
    num_alternatives: int = Field(0, description="Alternative translations per text.")
    max_length: int | None = Field(None, description="Maximum tokens per translated sentence.")
    model: str | None = Field(None, description="Bundle name; default: first that has the route.")


class DetectedLanguage(BaseModel):
    language: str
    confidence: float = Field(description="Probability among the candidate languages, 0..1.")


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
        description="Engine key that served it; null when the text was already in the "
        "target language and returned unchanged.",
    )


class TranslateResponse(BaseModel):
    translations: list[Translation]
    target: str
    model: str | None = Field(None, description="Bundle(s) that served the request.")
    request_id: str | None = None


class LanguageInfo(BaseModel):
    code: str
    name: str
    targets: list[str]


class LanguagesResponse(BaseModel):
    languages: list[LanguageInfo]
    routes: list[str]
    auto_detect: list[str] = Field(description="Languages the detector can recognise.")


class ErrorBody(BaseModel):
    code: str
    message: str
    model_config = ConfigDict(extra="allow")


class ErrorResponse(BaseModel):
    error: ErrorBody
    request_id: str | None = None


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "Bad request (language, route, parameters)."},
    401: {"model": ErrorResponse, "description": "API key missing."},
    403: {"model": ErrorResponse, "description": "API key invalid."},
    413: {"model": ErrorResponse, "description": "Text or request too large."},
    422: {"model": ErrorResponse, "description": "Body does not match the schema."},
    429: {"model": ErrorResponse, "description": "Queue full; see Retry-After."},
    503: {"model": ErrorResponse, "description": "Engine unavailable; see Retry-After."},
    504: {"model": ErrorResponse, "description": "Timed out."},
}
