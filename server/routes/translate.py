"""``POST /v1/translate``: one text or a list (plain text, or HTML with ``format=html``), with
the service's results as the documented response. The caller is identified (a route
dependency) before the body is validated, and the request counted against its limits before it
is translated."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request

from ..auth import CallerDep, admit
from ..dependencies import ServiceDep, StateDep
from ..errors import bad_request
from ..request_texts import request_terms, translate_texts
from ..results import TextResult
from ..schemas import (
    ERROR_RESPONSES,
    Alternative,
    DetectedLanguage,
    TranslateRequest,
    TranslateResponse,
    Translation,
)

router = APIRouter(tags=["translation"])


@router.post(
    "/v1/translate",
    response_model=TranslateResponse,
    responses=ERROR_RESPONSES,
    summary="Translate one text or a list of texts",
)
async def translate(
    req: TranslateRequest, request: Request, caller: CallerDep, state: StateDep, service: ServiceDep
) -> TranslateResponse:
    texts = [req.text] if isinstance(req.text, str) else list(req.text)
    opts = service.validate_options(req.beam_size, req.num_alternatives, req.max_length)
    if req.format == "html" and req.num_alternatives:
        raise bad_request(
            "invalid_field", "Alternatives are offered for format 'text' only.",
            parameter="num_alternatives", allowed=[0],
        )  # fmt: skip
    terms = await request_terms(
        state, caller, req.source, req.target, req.glossary, req.do_not_translate
    )
    await admit(state, caller, sum(len(t) for t in texts))
    deadline = time.monotonic() + state.settings.request_timeout_s
    results = await translate_texts(
        service, texts, req.source, req.target, opts, req.model, req.format == "html", terms,
        deadline, caller.subject,
    )  # fmt: skip
    models = sorted({m for r in results for m in (r.pivot_model, r.model) if m})
    return TranslateResponse(
        translations=[_translation(r) for r in results],
        target=req.target,
        model=",".join(models) or None,
        request_id=request.state.request_id,
    )


def _translation(r: TextResult) -> Translation:
    return Translation(
        text=r.text,
        source=r.source,
        detected=DetectedLanguage(language=r.source, confidence=r.detected_confidence)
        if r.detected_confidence is not None
        else None,
        score=r.score,
        alternatives=[Alternative(text=a.text, score=a.score) for a in r.alternatives],
        engine=r.engine,
        pivot=r.pivot,
        warnings=r.warnings,
    )
