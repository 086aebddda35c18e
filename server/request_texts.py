"""The texts of a ``/translate`` or ``/v1/translate`` request translated as its ``format``
and terms say: plain texts through the service; an HTML text (``format=html``) whole, its
blocks and attributes through the service, its inline markup kept in place
(``server.markup``), the rest of the document written back as it was; the request's glossary
and ``do_not_translate`` terms kept in either (``server.terms``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from .auth import Caller
from .documents.plain import html_document
from .results import TextResult
from .service import TranslationService
from .state import AppState
from .terms import Translate, translate_with_terms
from .validation import Options, Terms, parse_terms


async def request_terms(
    state: AppState,
    caller: Caller,
    source: str,
    target: str,
    glossary: dict[str, str] | None,
    do_not_translate: list[str] | None,
) -> Terms:
    """The terms a request keeps: those it gives (checked: 400 when they cannot be kept),
    over the glossary its key keeps for the pair (``python -m server keys glossary``; with
    ``source`` auto, those of every pair into ``target``)."""
    given = parse_terms(glossary, do_not_translate)
    kind, _, key_id = caller.subject.partition(":")
    if state.keys is None or kind != "key" or not key_id.isdigit() or len(key_id) > 18:
        return given  # no database key (an anonymous caller, a key from the settings)
    pair_source = None if source == "auto" else source
    stored = await asyncio.to_thread(state.keys.glossary, int(key_id), pair_source, target)
    given_terms = {t.casefold() for t in given.required}
    kept = {t: r for t, r in stored.items() if t.casefold() not in given_terms}
    return Terms({**kept, **given.required}) if kept else given


async def translate_texts(
    service: TranslationService,
    texts: list[str],
    source: str,
    target: str,
    opts: Options,
    model: str | None,
    html: bool,
    terms: Terms,
    deadline: float,
    client: str,
) -> list[TextResult]:
    """The request's texts translated, one result each, in order (the texts checked first:
    the terms translated alone are not counted as texts)."""
    service.validate_texts(texts)
    if html:
        service.validate_languages(source, target, model)
        return [
            await translate_html(service, t, source, target, opts, model, deadline, client, terms)
            for t in texts
        ]

    translate = service_translate(service, target, opts, model, deadline, client)
    return await translate_with_terms(translate, texts, source, terms)


def service_translate(
    service: TranslationService,
    target: str,
    opts: Options,
    model: str | None,
    deadline: float,
    client: str,
) -> Translate:
    """The service's translate for one request, as ``server.terms`` calls it (texts, source);
    the texts were checked already, so the terms translated alone are not counted."""

    def translate(texts: list[str], source: str) -> Awaitable[list[TextResult]]:
        return service.translate(
            texts, source, target, opts, model, limit_count=False, deadline=deadline,
            client=client,
        )  # fmt: skip

    return translate


async def translate_html(
    service: TranslationService,
    doc: str,
    source: str,
    target: str,
    opts: Options,
    model: str | None,
    deadline: float,
    client: str,
    terms: Terms | None = None,
) -> TextResult:
    """The document translated, as one result: ``source`` ``auto`` is detected on the whole
    document's text (not per fragment); the engine is the one its texts went through; the
    request's ``terms`` are kept in every text."""
    document = await asyncio.to_thread(html_document, doc)  # a large document: off the loop
    if not document.texts:  # nothing to translate (nor to detect a language on)
        return TextResult(doc, source)
    confidence = None
    if source == "auto":
        guess = service.detection.detect(" ".join(document.texts), target, model)
        source, confidence = guess.language, guess.confidence
    if source == target:
        return TextResult(doc, source, confidence)

    translate = service_translate(service, target, opts, model, deadline, client)
    results = await translate_with_terms(translate, document.texts, source, terms or Terms())
    rebuilt = await asyncio.to_thread(document.rebuild, [r.text for r in results])
    text = rebuilt.decode("utf-8")
    translated = next((r for r in results if r.engine), TextResult(text, source))
    warnings = sorted({w for r in results for w in r.warnings})
    return TextResult(
        text, source, confidence, engine=translated.engine, warnings=warnings,
        pivot=translated.pivot, pivot_engine=translated.pivot_engine,
        model=translated.model, pivot_model=translated.pivot_model,
    )  # fmt: skip
