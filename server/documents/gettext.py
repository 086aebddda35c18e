"""gettext catalogues (.po): every entry without a translation gets one (its msgid, and for
plural forms its msgid_plural into every plural msgstr the header's ``nplurals`` asks for),
marked ``fuzzy`` so that a translator reviews it; entries already translated (or fuzzy) and
obsolete ones are kept as they are. Format placeholders (``%s``, ``%(name)d``, ``%1$s``,
``{name}``) are kept exactly: each one the msgid has is in the msgstr as many times (put
between words where the model dropped it), none is added, and unnamed ``printf`` ones keep
the msgid's order, so that the catalogue passes ``msgfmt --check``.

The header's ``Language`` names the target, and its ``Plural-Forms`` are the target's
(``plural_rule``: Babel's table, the one ``pybabel init`` writes: Russian 3 forms, Arabic 6,
French 2 with ``n > 1``) unless the catalogue was already made for the target (its own rule is
the translators' choice) or Babel has no rule for it. A new plural entry gets every form the
rule has: the form ``n = 1`` takes holds the msgid's translation (where no other count takes it
too), the others the msgid_plural's. An entry translated before whose forms do not number the
new rule's is padded with its last form (or cut) and marked fuzzy: its forms were written for
another rule. Read and written by polib (line wrapping, escapes, flags and plural forms as
gettext writes them)."""

from __future__ import annotations

import gettext
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

import polib
from babel import Locale, UnknownLocaleError
from babel.messages.plurals import PLURALS, get_plural

from ..markup import Span, place
from .languages import Languages, bcp47, primary
from .model import Document, DocumentError, decode_utf8

PLACEHOLDER = re.compile(
    r"%(?:\(\w+\)|\d+\$)?[-+ #0]*\d*(?:\.\d+)?(?:hh|h|ll|l|L|q|j|z|t)?[diouxXeEfFgGcrsa]"
    r"|\{\w*(?:[.\[]\w+\]?)*(?:![rsa])?(?::[^{}]*)?\}"
)
NAMED = re.compile(r"%\(\w+\)|%\d+\$|\{\w+")


def po_document(data: bytes) -> Document:
    decode_utf8(data, "gettext (.po)")
    # polib reads a path when given a string that names a file: an upload whose content were
    # "/etc/passwd" would read the server's file. It reads the upload from a file of its own.
    with tempfile.NamedTemporaryFile(suffix=".po") as f:
        f.write(data)
        f.flush()
        try:
            catalogue = polib.pofile(f.name, encoding="utf-8")
        except (OSError, ValueError, UnicodeError) as exc:
            raise DocumentError(f"not a gettext (.po) file ({exc})") from None
    entries = [e for e in catalogue if not e.obsolete and e.msgid and not _translated(e)]
    texts: list[str] = []
    for e in entries:
        texts += [e.msgid, e.msgid_plural] if e.msgid_plural else [e.msgid]

    def rebuild(translations: list[str], languages: Languages | None) -> bytes:
        if len(translations) != len(texts):
            raise ValueError(f"{len(translations)} translations for {len(texts)} texts")
        rule = _header_rule(catalogue.metadata)
        if languages is not None and (target_rule := _new_rule(catalogue, languages)):
            rule = target_rule
            catalogue.metadata["Plural-Forms"] = rule.header
            filled = {id(e) for e in entries}
            for e in catalogue:  # translated before, for another rule
                if e.msgid_plural and not e.obsolete and id(e) not in filled:
                    _fit_forms(e, rule.count)
        done, singular = iter(translations), rule.one
        for e in entries:
            if e.msgid_plural:
                one, many = keep_placeholders(e.msgid, next(done)), next(done)
                many = keep_placeholders(e.msgid_plural, many)
                e.msgstr_plural = {k: one if k == singular else many for k in range(rule.count)}
            else:
                e.msgstr = keep_placeholders(e.msgid, next(done))
            _mark_fuzzy(e)
        catalogue.metadata["Content-Type"] = "text/plain; charset=UTF-8"  # as written
        if languages is not None:  # the catalogue's language, as gettext writes it: pt_BR
            catalogue.metadata["Language"] = bcp47(languages.target).replace("-", "_")
        return str(catalogue).encode("utf-8")

    return Document(texts, rebuild)


@dataclass(frozen=True)
class PluralRule:
    """A language's plural forms as a catalogue's header states them: ``count`` forms, the C
    expression that picks one for a number ``n``; ``one``: the form that holds the singular
    (the one n = 1 takes, where n = 2 does not take it too; None: every form is plural)."""

    count: int
    expression: str

    @property
    def header(self) -> str:
        return f"nplurals={self.count}; plural={self.expression};"

    @property
    def one(self) -> int | None:
        pick: Callable[[int], int] = gettext.c2py(self.expression)
        return None if pick(1) == pick(2) else pick(1)


ENGLISH_RULE = PluralRule(2, "(n != 1)")  # a catalogue without a rule: gettext's own default


def plural_rule(code: str) -> PluralRule | None:
    """A language's plural forms, as ``pybabel init`` writes them (Babel's table); None for a
    language the table lacks (Babel would guess English's)."""
    try:
        locale = Locale.parse(bcp47(code), sep="-")
    except (UnknownLocaleError, ValueError):
        return None
    if str(locale) not in PLURALS and locale.language not in PLURALS:
        return None
    plural = get_plural(locale)
    return PluralRule(plural.num_plurals, plural.plural_expr)


def _header_rule(metadata: dict[str, str]) -> PluralRule:
    """The rule the header states; a header without a readable one: English's."""
    found = re.search(
        r"nplurals\s*=\s*(\d+)\s*;\s*plural\s*=\s*([^;]+)", metadata.get("Plural-Forms", "")
    )
    if found is None:
        return ENGLISH_RULE
    count, expression = int(found.group(1)), found.group(2).strip()
    try:
        gettext.c2py(expression)
    except (ValueError, SyntaxError, RecursionError):  # one gettext's own parser refuses
        expression = "(n != 1)" if count > 1 else "0"
    return PluralRule(count, expression)


def _new_rule(catalogue: polib.POFile, languages: Languages) -> PluralRule | None:
    """The target's rule, where it replaces the header's: not in a catalogue made for the
    target that states a rule already."""
    language = catalogue.metadata.get("Language", "")
    made_for_target = bool(language) and primary(language) == primary(languages.target)
    if made_for_target and "Plural-Forms" in catalogue.metadata:
        return None
    return plural_rule(languages.target)


def _fit_forms(entry: polib.POEntry, count: int) -> None:
    forms = [entry.msgstr_plural[k] for k in sorted(entry.msgstr_plural)]
    if len(forms) == count or not any(forms):
        return
    forms = (forms + [forms[-1]] * count)[:count]
    entry.msgstr_plural = dict(enumerate(forms))
    _mark_fuzzy(entry)


def _mark_fuzzy(entry: polib.POEntry) -> None:
    if "fuzzy" not in entry.flags:
        entry.flags.insert(0, "fuzzy")  # first, as gettext writes it


def _translated(entry: polib.POEntry) -> bool:
    return bool(entry.msgstr or any(entry.msgstr_plural.values()) or "fuzzy" in entry.flags)


def keep_placeholders(source: str, target: str) -> str:
    """``target`` with exactly the placeholders of ``source``: extra ones removed, missing
    ones put between words where they were in the source, and unnamed ones in its order."""
    wanted = [m.group() for m in PLACEHOLDER.finditer(source)]
    if not wanted and "%" not in target and "{" not in target:
        return target
    found = list(PLACEHOLDER.finditer(target))
    budget = {p: wanted.count(p) for p in wanted}
    kept_parts, at = [], 0
    for m in found:  # drop what the source does not have (or has fewer of)
        kept_parts.append(target[at : m.start()])
        if budget.get(m.group(), 0) > 0:
            budget[m.group()] -= 1
            kept_parts.append(m.group())
        at = m.end()
    target = re.sub(r"  +", " ", "".join(kept_parts) + target[at:]).strip()
    missing = [m for m in PLACEHOLDER.finditer(source) if budget.get(m.group(), 0) > 0]
    for m in missing:
        budget[m.group()] -= 1
    if missing:  # put each where its share of the source says, between words
        spans = [Span(None, None, m.start(), m.start(), void=True) for m in missing]
        placed = place(source, spans, target, [])
        for span, m in sorted(zip(spans, missing, strict=True),
                              key=lambda x: -placed[id(x[0])].start):  # fmt: skip
            at = placed[id(span)].start
            left = " " if at > 0 and not target[at - 1].isspace() else ""
            right = " " if at < len(target) and not target[at].isspace() else ""
            target = target[:at] + left + m.group() + right + target[at:]
    if not all(NAMED.match(p) for p in wanted):  # unnamed: the source's order
        order = iter(wanted)
        target = PLACEHOLDER.sub(lambda _: next(order), target)
    return target
