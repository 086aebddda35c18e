"""Terminology a request asks for (issue 48): ``glossary`` (a source term and the target term
it must become) and ``do_not_translate`` (terms written as they are: names, products, code).

A term is found in the source text (case-insensitive, on word boundaries, the longest first),
the text is translated whole, and the words of the translation that render the term are found
as an inline element's are (``server.markup.place``: the term as written, then the term
translated alone, exactly or as the closest words, else its share of the sentence); the
required term is written there, capitalised when the words it replaces were. The model never
sees a placeholder it was not trained on, so a sentence reads as well as without the
glossary; inflection is not handled: the term is written as given.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from .markup import Span, place
from .results import TextResult
from .validation import Terms

Translate = Callable[[list[str], str], Awaitable[list[TextResult]]]  # texts, source


@dataclass
class TermUse:
    """A term found in a text: ``span`` covers it, ``wanted`` is what it must become."""

    span: Span
    wanted: str


def find_terms(text: str, terms: Terms) -> list[TermUse]:
    """The terms in ``text``, the longest first, none overlapping another."""
    uses: list[TermUse] = []
    taken: list[tuple[int, int]] = []
    for term in sorted(terms.required, key=len, reverse=True):
        left = r"(?<!\w)" if term[0].isalnum() else ""
        right = r"(?!\w)" if term[-1].isalnum() else ""
        for m in re.finditer(left + re.escape(term) + right, text, re.IGNORECASE):
            if all(m.end() <= a or m.start() >= b for a, b in taken):
                taken.append(m.span())
                uses.append(TermUse(Span(None, None, m.start(), m.end()), terms.required[term]))
    return sorted(uses, key=lambda u: u.span.start)


async def translate_with_terms(
    translate: Translate, texts: list[str], source: str, terms: Terms
) -> list[TextResult]:
    """``translate(texts, source)`` with the terms kept. Each term found is also translated
    alone, to find its words in the translation: with the texts when the source is given,
    after them (in the language detected for each text) when it is ``auto``."""
    uses = [find_terms(t, terms) for t in texts]
    # each term as written, once per source language (a term found many times is one text)
    wanted_alone: dict[tuple[str, str], int] = {}
    for i, us in enumerate(uses):
        for u in us:
            key = (texts[i][u.span.start : u.span.end], str(i) if source == "auto" else source)
            u.span.text_slot = len(texts) + wanted_alone.setdefault(key, len(wanted_alone))
    alone = [term for term, _ in wanted_alone]
    if not alone:
        return await translate(texts, source)
    if source != "auto":
        results = await translate(texts + alone, source)
        results, extra = results[: len(texts)], [r.text for r in results[len(texts) :]]
    else:  # after the texts: each term in the language detected for its text
        results = await translate(texts, source)
        extra = [""] * len(alone)
        by_source: dict[str, list[int]] = {}
        for (_, text_index), k in wanted_alone.items():
            by_source.setdefault(results[int(text_index)].source, []).append(k)
        for lang, slots in by_source.items():
            done = await translate([alone[k] for k in slots], lang)
            for k, r in zip(slots, done, strict=True):
                extra[k] = r.text
    translations = texts + extra
    out = []
    for text, result, us in zip(texts, results, uses, strict=True):
        if not us or result.engine is None:  # nothing found, or nothing translated
            out.append(result)
            continue
        alternatives = [replace(a, text=keep_terms(text, a.text, us, translations))
                        for a in result.alternatives]  # fmt: skip
        kept = keep_terms(text, result.text, us, translations)
        out.append(replace(result, text=kept, alternatives=alternatives))
    return out


def keep_terms(source: str, target: str, uses: list[TermUse], translations: list[str]) -> str:
    """``target`` (the translation of ``source``) with each term's words replaced by the term
    it must become."""
    placed = place(source, [u.span for u in uses], target, translations)
    out, at = [], 0
    for u in sorted(uses, key=lambda u: placed[id(u.span)].start):
        where = placed[id(u.span)]
        wanted = u.wanted
        words = target[where.start : where.end]
        if words[:1].isupper() and wanted[:1].islower():
            wanted = wanted[0].upper() + wanted[1:]
        gap = target[at : where.start]
        if where.start == where.end:  # no words to replace: the term goes in between
            pad_left = " " if gap and not gap[-1].isspace() else ""
            pad_right = " " if target[where.end : where.end + 1].isalnum() else ""
            wanted = pad_left + wanted + pad_right
        out += [gap, wanted]
        at = where.end
    out.append(target[at:])
    return "".join(out)
