"""gettext catalogues (.po): every entry without a translation gets one (its msgid, and for
plural forms its msgid_plural into every plural msgstr the header's ``nplurals`` asks for),
marked ``fuzzy`` so that a translator reviews it; entries already translated (or fuzzy) and
obsolete ones are kept as they are. Format placeholders (``%s``, ``%(name)d``, ``%1$s``,
``{name}``) are kept exactly: each one the msgid has is in the msgstr as many times (put
between words where the model dropped it), none is added, and unnamed ``printf`` ones keep
the msgid's order, so that the catalogue passes ``msgfmt --check``. The header's ``Language``
names the target (its ``Plural-Forms`` stay the catalogue's). Read and written by polib (line
wrapping, escapes, flags and plural forms as gettext writes them)."""

from __future__ import annotations

import re
import tempfile

import polib

from ..markup import Span, place
from .languages import Languages, bcp47
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
    match = re.search(r"nplurals\s*=\s*(\d+)", catalogue.metadata.get("Plural-Forms", ""))
    plurals = int(match.group(1)) if match else 2
    entries = [e for e in catalogue if not e.obsolete and e.msgid and not _translated(e)]
    texts: list[str] = []
    for e in entries:
        texts += [e.msgid, e.msgid_plural] if e.msgid_plural else [e.msgid]

    def rebuild(translations: list[str], languages: Languages | None) -> bytes:
        if len(translations) != len(texts):
            raise ValueError(f"{len(translations)} translations for {len(texts)} texts")
        done = iter(translations)
        for e in entries:
            if e.msgid_plural:
                one, many = keep_placeholders(e.msgid, next(done)), next(done)
                many = keep_placeholders(e.msgid_plural, many)
                e.msgstr_plural = {k: one if k == 0 else many for k in range(plurals)}
            else:
                e.msgstr = keep_placeholders(e.msgid, next(done))
            if "fuzzy" not in e.flags:
                e.flags.insert(0, "fuzzy")  # first, as gettext writes it
        catalogue.metadata["Content-Type"] = "text/plain; charset=UTF-8"  # as written
        if languages is not None:  # the catalogue's language, as gettext writes it: pt_BR
            catalogue.metadata["Language"] = bcp47(languages.target).replace("-", "_")
        return str(catalogue).encode("utf-8")

    return Document(texts, rebuild)


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
