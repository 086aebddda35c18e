"""An HTML text of ``/translate`` or ``/v1/translate`` (``format=html``) translated whole:
its blocks and attributes through the service, its inline markup kept in place
(``server.markup``), the rest of the document written back as it was."""

from __future__ import annotations

from .documents import html_document
from .service import TextResult, TranslationService
from .validation import Options


async def translate_html(
    svc: TranslationService,
    doc: str,
    source: str,
    target: str,
    opts: Options,
    model: str | None,
    deadline: float,
    client: str,
) -> TextResult:
    """The document translated, as one result: ``source`` ``auto`` is detected on the whole
    document's text (not per fragment); the engine is the one its texts went through."""
    document = html_document(doc)
    if not document.texts:  # nothing to translate (nor to detect a language on)
        return TextResult(doc, source)
    confidence = None
    if source == "auto":
        guess = svc.detect(" ".join(document.texts), target, model)
        source, confidence = guess.language, guess.confidence
    if source == target:
        return TextResult(doc, source, confidence)
    results = await svc.translate(
        document.texts, source, target, opts, model, limit_count=False, deadline=deadline,
        client=client,
    )  # fmt: skip
    text = document.rebuild([r.text for r in results]).decode("utf-8")
    engine = next((r.engine for r in results if r.engine), None)
    warnings = sorted({w for r in results for w in r.warnings})
    return TextResult(text, source, confidence, engine=engine, warnings=warnings)
