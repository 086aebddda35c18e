"""The language a translated document declares (issue 48): where a format has a language tag,
the translation names its target, not its source.

One rule for every format: a tag that names the source language (by its primary subtag: "en-GB"
names "en") becomes the target, and a tag naming another language (a German quotation in an
English text) stays; the tag that declares the whole document's language (HTML's root element,
a book's first ``dc:language``, Word's and OpenDocument's default style, a catalogue's
``Language``) becomes the target whatever it named. Where a format keeps one language per class
of script (Word's ``val``, ``eastAsia`` and ``bidi``; OpenDocument's western, Asian and complex
pairs), the target's own class names the target too.

Each format writes the target in the form its readers know: BCP 47 as the request named it
(HTML, EPUB, and ``pt_BR`` style in gettext); language and region in office formats
(``regional``: Word's proofing languages are locales, and it writes and expects
``fr-FR``; LibreOffice keeps a language with a country).

The direction a document is written in follows the target where it turns (``Languages.turns``:
English into Arabic, Arabic into English): which languages are written right to left is
CLDR's character order, as Babel has it (``direction``), the one place that says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Literal

from babel import Locale, UnknownLocaleError

from ..markup import Attributes, Token

# The locale an office suite takes for each language LSMT serves: the one Word writes when that
# language is chosen, Windows' default locale of the language (its primary locale id, 0x04xx),
# except Chinese, which LSMT serves simplified, as on the mainland. Swahili is Kenya's and
# Tagalog is Filipino, the locales Windows has for them. A language missing here is written
# without a region.
LOCALES = {
    "ar": "ar-SA", "bn": "bn-IN", "de": "de-DE", "en": "en-US", "es": "es-ES", "fa": "fa-IR",
    "fr": "fr-FR", "hi": "hi-IN", "id": "id-ID", "it": "it-IT", "ja": "ja-JP", "ko": "ko-KR",
    "pl": "pl-PL", "pt": "pt-BR", "ro": "ro-RO", "ru": "ru-RU", "sw": "sw-KE", "tl": "fil-PH",
    "tr": "tr-TR", "uk": "uk-UA", "vi": "vi-VN", "zh": "zh-CN",
}  # fmt: skip
SAME_LANGUAGE = {"fil": "tl"}  # Filipino, as office suites name Tagalog
# Script classes, as Word (``eastAsia``, ``bidi``) and OpenDocument (``-asian``, ``-complex``)
# keep them: every other language is "western".
ASIAN = frozenset({"zh", "ja", "ko"})
COMPLEX = frozenset({"ar", "fa", "he", "ur", "ps", "sd", "yi", "hi", "bn", "mr", "ne", "pa",
                     "gu", "ta", "te", "kn", "ml", "si", "th", "lo", "km", "my", "dv"})  # fmt: skip
REGION = re.compile(r"^(?:[A-Za-z]{2}|\d{3})$")


@dataclass(frozen=True)
class Languages:
    """What a document was translated from and into: language codes as a request names them
    ("en", "pt-BR"). With ``auto``, ``source`` is the language detected for most of its text
    (``auto`` itself names no tag: only the document's declared language is then set)."""

    source: str
    target: str

    def names_source(self, tag: str | None) -> bool:
        return bool(tag) and primary(tag or "") == primary(self.source)

    @property
    def direction(self) -> Direction:
        """The direction the target is written in."""
        return direction(self.target)

    @property
    def turns(self) -> bool:
        """Whether the text changes direction (English into Arabic, or Arabic into English):
        a document's own direction marks then name the target's."""
        return direction(self.source) != direction(self.target)


Direction = Literal["ltr", "rtl"]


@cache
def direction(code: str) -> Direction:
    """ "rtl" for a language written right to left (Arabic, Persian, Hebrew, Urdu; a script
    subtag counts: "pa-Arab"), by CLDR's character order; "ltr" for any other, and for a code
    CLDR does not know ("auto")."""
    try:
        locale = Locale.parse(bcp47(code), sep="-")
    except (UnknownLocaleError, ValueError, TypeError):
        return "ltr"
    return "rtl" if locale.text_direction == "rtl" else "ltr"


def primary(tag: str) -> str:
    language = re.split(r"[-_]", tag.strip(), maxsplit=1)[0].lower()
    return SAME_LANGUAGE.get(language, language)


def bcp47(code: str) -> str:
    """A code as a BCP 47 tag: "pt_br" -> "pt-BR"."""
    language, *rest = re.split(r"[-_]", code.strip())
    return "-".join([language.lower()] + [s.upper() if REGION.match(s) else s for s in rest])


def regional(code: str) -> str:
    """A code with the region office suites expect: "fr" -> "fr-FR"; a code that names its
    region, or a language not in ``LOCALES``, as it is."""
    tag = bcp47(code)
    return tag if "-" in tag else LOCALES.get(tag, tag)


def split_region(tag: str) -> tuple[str, str | None]:
    """A tag's language (with its script, if any) and its region: "zh-Hant-TW" ->
    ("zh-Hant", "TW"); "fr" -> ("fr", None)."""
    subtags = tag.split("-")
    if len(subtags) > 1 and REGION.match(subtags[-1]):
        return "-".join(subtags[:-1]), subtags[-1]
    return tag, None


def script_class(code: str) -> str:
    language = primary(code)
    return "asian" if language in ASIAN else "complex" if language in COMPLEX else "western"


def retagged(
    tags: dict[str, str], languages: Languages, form: Callable[[str], str], declares: bool
) -> dict[str, str]:
    """The new tags of one element that keeps a tag per script class (``tags``: class ->
    tag): each that names the source becomes the target, written in ``form``, and so does
    the target's own class where one did or where the element ``declares`` the document's
    language. Only the tags that change."""
    target = form(languages.target)
    new = {script: target for script, tag in tags.items() if languages.names_source(tag)}
    if new or declares:
        new[script_class(languages.target)] = target
    return {script: tag for script, tag in new.items() if tags.get(script) != tag}


def html_language(languages: Languages | None) -> Attributes | None:
    """How HTML's start tags declare the target (``server.markup``'s ``Attributes``): the
    root's ``lang`` and ``xml:lang`` (``lang`` added where it has neither) and a
    ``content-language`` pragma set to it, another element's where they name the source.

    The root's ``dir`` states the target's direction where the target is written right to
    left or the root states one (not ``auto``); where the direction turns, another element's
    ``dir`` that stated the source's states the target's (not one of an element in another
    language, which keeps its own)."""
    if languages is None:
        return None
    target, source_direction = bcp47(languages.target), direction(languages.source)

    def attributes(token: Token) -> dict[str, str]:
        values = dict(token.attrs)
        if token.tag == "meta" and (values.get("http-equiv") or "").lower() == "content-language":
            return {"content": target}
        names = [name for name in ("lang", "xml:lang") if name in values]
        stated = (values.get("dir") or "").strip().lower()
        if token.tag == "html":
            declared: dict[str, str] = dict.fromkeys(names or ["lang"], target)
            if stated != "auto" and (languages.direction == "rtl" or stated):
                declared["dir"] = languages.direction
            return declared
        other = any(values[name] and not languages.names_source(values[name]) for name in names)
        given: dict[str, str] = {
            name: target for name in names if languages.names_source(values[name])
        }
        if languages.turns and stated == source_direction and not other:
            given["dir"] = languages.direction
        return given

    return attributes


DC_LANGUAGE = re.compile(r"<((?:[\w.-]+:)?language)(?:\s[^>]*)?(?<!/)>([^<]*)</\1\s*>\s*")


def with_dc_language(xml: str, languages: Languages, form: Callable[[str], str]) -> str:
    """A package document's or OpenDocument meta part's Dublin Core ``language`` elements:
    the first (the document's language) set to the target, written in ``form``; a later one
    that named the source or the target dropped (the text is in neither any more, or twice).
    Edited as text, so that everything else stays byte for byte (an EPUB package document may
    bind its namespace both as the default and as ``opf:``, which ElementTree cannot write)."""
    target = form(languages.target)
    seen = 0

    def retag(found: re.Match[str]) -> str:
        nonlocal seen
        seen += 1
        tag = found.group(2)
        if seen == 1:
            at, end = found.start(2) - found.start(), found.end(2) - found.start()
            return found.group()[:at] + target + found.group()[end:]
        named = languages.names_source(tag) or primary(tag) == primary(target)
        return "" if named else found.group()

    return DC_LANGUAGE.sub(retag, xml)
