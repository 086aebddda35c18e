"""What the service checks before any work, from the settings alone: the decoding options
(beam size, alternatives, output length) and the texts (count, emptiness, Unicode, length).

The checks that need the bundles (languages, routes, models) are ``server.catalogue``'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .failures import InvalidRequest, TooLarge
from .settings import Settings

AUTO = "auto"  # the source that asks for detection (``server.detection``)

# A lone surrogate cannot be encoded to UTF-8 (the tokenizer would fail on it).
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass
class Options:
    beam_size: int
    num_alternatives: int
    max_length: int


def check_range(parameter: str, value: int, low: int, high: int, message: str = "") -> None:
    """``low <= value <= high``, or the 400 ``parameter_out_of_range`` naming the parameter
    and its allowed range (``message`` replaces the default wording)."""
    if not low <= value <= high:
        raise InvalidRequest(
            "parameter_out_of_range",
            message or f"{parameter}={value} is out of range; allowed {low}..{high}.",
            parameter=parameter,
            allowed={"min": low, "max": high},
        )


def validate_options(
    s: Settings, beam_size: int | None, num_alternatives: int | None, max_length: int | None
) -> Options:
    """The decoding options with the server's defaults filled in, each within its range."""
    n_alt = 0 if num_alternatives is None else num_alternatives
    check_range("num_alternatives", n_alt, 0, s.max_alternatives)
    if beam_size is None:
        beam = min(max(s.default_beam_size, n_alt + 1), s.max_beam_size)
    else:
        beam = beam_size
    check_range("beam_size", beam, 1, s.max_beam_size)
    # Alternatives come from the beam: it must hold one more hypothesis than they need.
    needs = f"num_alternatives={n_alt} needs beam_size >= {n_alt + 1} (got {beam})."
    check_range("beam_size", beam, n_alt + 1, s.max_beam_size, needs)
    max_len = s.default_max_length if max_length is None else max_length
    check_range("max_length", max_len, 1, s.max_length_limit)
    return Options(beam, n_alt, max_len)


def validate_texts(
    s: Settings, texts: list[str], *, limit_count: bool = True, blank_ok: bool = False
) -> None:
    """At least one text, at most ``max_texts`` (when ``limit_count``), each holding something
    to translate (or, with ``blank_ok``, at least one character: whitespace only passes),
    valid Unicode and at most ``max_chars_per_text`` characters."""
    if not texts:
        raise InvalidRequest("empty_text", "No text given: send at least one non-empty text.")
    if limit_count and len(texts) > s.max_texts:
        raise TooLarge(
            "too_many_texts",
            f"{len(texts)} texts in one request; at most {s.max_texts} are allowed.",
            limit=s.max_texts,
        )
    for i, t in enumerate(texts):
        if not (t if blank_ok else t.strip()):
            raise InvalidRequest(
                "empty_text",
                f"Text {i} is {'empty' if blank_ok else 'empty or whitespace only'}; every "
                "text must contain something to translate.",
                index=i,
            )
        bad = _SURROGATE.search(t)
        if bad:
            raise InvalidRequest(
                "invalid_text",
                f"Text {i} holds a lone UTF-16 surrogate (U+{ord(bad.group()):04X}) at "
                f"character {bad.start()}: texts must be valid Unicode (escape "
                "characters outside the BMP as a surrogate pair, or send UTF-8).",
                index=i,
            )
        if len(t) > s.max_chars_per_text:
            raise TooLarge(
                "text_too_long",
                f"Text {i} has {len(t)} characters; at most {s.max_chars_per_text} "
                "are allowed per text.",
                index=i,
                limit=s.max_chars_per_text,
            )


# Terms (server.terms) ------------------------------------------------------------------------

MAX_TERMS = 200
MAX_TERM_CHARS = 200


@dataclass(frozen=True)
class Terms:
    """What a request asks of its terms: each source term (as given) and what it becomes."""

    required: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.required)


def parse_terms(glossary: dict[str, str] | None, do_not_translate: list[str] | None) -> Terms:
    """The request's terms, checked: 400 ``invalid_field`` naming what is wrong."""
    required: dict[str, str] = {}
    entries = [("glossary", s, t) for s, t in (glossary or {}).items()]
    entries += [("do_not_translate", s, s) for s in do_not_translate or []]
    if len(entries) > MAX_TERMS:
        raise InvalidRequest(
            "invalid_field", f"At most {MAX_TERMS} glossary and do_not_translate terms.",
            parameter="glossary",
        )  # fmt: skip
    seen: dict[str, str] = {}
    for name, source, target in entries:
        term, wanted = source.strip(), target.strip()
        if not term or not wanted or max(len(term), len(wanted)) > MAX_TERM_CHARS:
            raise InvalidRequest(
                "invalid_field",
                f"Field {name!r}: every term must be 1 to {MAX_TERM_CHARS} characters "
                f"(got {source!r}" + (f" -> {target!r})" if name == "glossary" else ")"),
                parameter=name,
            )
        if seen.get(term.casefold(), wanted) != wanted:
            raise InvalidRequest(
                "invalid_field", f"Term {term!r} is given two renderings.", parameter=name
            )
        seen[term.casefold()] = wanted
        required[term] = wanted
    return Terms(required)
