"""gettext catalogues (``server.documents.gettext``): made by gettext's own tools, filled and
checked by msgfmt; read from their bytes only; the header names the target."""

from __future__ import annotations

import subprocess

import polib
import pytest

from server.documents import DocumentError, Languages, open_document
from tests.server.document_files import gettext_tools


def test_gettext_catalogues_made_by_xgettext_pass_msgfmt(tmp_path):
    gettext_tools()
    source = tmp_path / "app.c"
    source.write_text(
        '#include <libintl.h>\n#define _(s) gettext(s)\n'
        'void f(int n, char *name) {\n'
        '  printf(_("Hello %s, you have %d new messages."), name, n);\n'
        '  printf(ngettext("%d file", "%d files", n), n);\n'
        '  printf(_("Save"));\n}\n'
    )  # fmt: skip
    pot = tmp_path / "app.pot"
    run = lambda *cmd: subprocess.run(cmd, check=True, capture_output=True, cwd=tmp_path)  # noqa: E731
    run("xgettext", "--keyword=_", "--keyword=ngettext:1,2", "-o", str(pot), str(source))
    run("msginit", "--no-translator", "--locale=ru_RU.UTF-8", "-i", str(pot), "-o", "ru.po")
    po = (tmp_path / "ru.po").read_bytes()
    po = po.replace(b'msgid "Save"\nmsgstr ""', b'msgid "Save"\nmsgstr "Sohranit"')
    document = open_document("ru.po", po)
    assert document.texts == ["Hello %s, you have %d new messages.", "%d file", "%d files"]
    # the model drops one placeholder, swaps the order of two, and invents one
    out = document.rebuild(
        ["Bonjour, vous avez %d nouveaux messages %s.", "%s fichier", "fichiers %d"]
    )
    (tmp_path / "out.po").write_bytes(out)
    run("msgfmt", "--check", "-o", "/dev/null", "out.po")
    catalogue = out.decode()
    assert 'msgstr "Bonjour, vous avez %s nouveaux messages %d."' in catalogue
    assert 'msgstr[0] "%d fichier"' in catalogue and 'msgstr[2] "fichiers %d"' in catalogue
    assert catalogue.count("#, fuzzy, c-format") == 2
    assert 'msgstr "Sohranit"' in catalogue  # a translation already there is kept


def test_a_po_file_is_read_from_its_bytes_never_from_a_path_it_names():
    with pytest.raises(DocumentError):
        open_document("x.po", b"/etc/passwd")


def test_a_catalogue_names_the_target_in_its_header():
    po = (
        'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n"Language: ru\\n"\n\n'
        'msgid "Save"\nmsgstr ""\n'
    )
    document = open_document("app.po", po.encode())
    catalogue = polib.pofile(document.rebuild(["Salvar"], Languages("en", "pt-BR")).decode())
    assert catalogue.metadata["Language"] == "pt_BR"
    assert catalogue.find("Save").msgstr == "Salvar"


def catalogue_for(tmp_path, locale: str | None) -> bytes:
    """The template xgettext makes (``locale`` None: its header states no rule), or the
    catalogue msginit makes of it for ``locale``, with its second entry translated already."""
    gettext_tools()
    (tmp_path / "app.c").write_text(
        "#include <libintl.h>\nvoid f(int n) {\n"
        '  printf(ngettext("%d file", "%d files", n), n);\n'
        '  printf(ngettext("%d page", "%d pages", n), n);\n}\n'
    )
    run = lambda *cmd: subprocess.run(cmd, check=True, capture_output=True, cwd=tmp_path)  # noqa: E731
    run("xgettext", "--keyword=ngettext:1,2", "-o", "app.pot", "app.c")
    if locale is None:
        return (tmp_path / "app.pot").read_bytes()
    run("msginit", "--no-translator", f"--locale={locale}.UTF-8", "-i", "app.pot", "-o", "x.po")
    return (
        (tmp_path / "x.po")
        .read_text()
        .replace(
            'msgid_plural "%d pages"\nmsgstr[0] ""\nmsgstr[1] ""',
            'msgid_plural "%d pages"\nmsgstr[0] "one %d"\nmsgstr[1] "many %d"',
        )
        .encode()
    )


def msgfmt_check(tmp_path, po: bytes) -> None:
    (tmp_path / "out.po").write_bytes(po)
    check = subprocess.run(["msgfmt", "--check", "-o", "/dev/null", "out.po"], cwd=tmp_path,
                           capture_output=True, text=True)  # fmt: skip
    assert check.returncode == 0, (check.stderr, po.decode())


@pytest.mark.parametrize(
    ("target", "count", "singular", "expression"),
    [("ar", 6, 1, "n==0 ? 0 : n==1 ? 1 : n==2 ? 2"), ("ru", 3, 0, "n%10==1 && n%100!=11"),
     ("fr", 2, 0, "(n > 1)"), ("ja", 1, None, "plural=0;")],
)  # fmt: skip
def test_a_template_takes_the_targets_plural_forms(tmp_path, target, count, singular, expression):
    document = open_document("app.po", catalogue_for(tmp_path, None))
    assert document.texts == ["%d file", "%d files", "%d page", "%d pages"]
    out = document.rebuild(["ONE %d", "MANY %d"] * 2, Languages("en", target))
    msgfmt_check(tmp_path, out)
    catalogue = polib.pofile(out.decode())
    assert catalogue.metadata["Plural-Forms"].startswith(f"nplurals={count}; plural=")
    assert expression in catalogue.metadata["Plural-Forms"]
    filled = catalogue.find("%d file").msgstr_plural
    assert sorted(filled) == list(range(count))
    # the form n = 1 takes holds the singular; with one form for every count, the plural
    assert [k for k, text in filled.items() if text == "ONE %d"] == (
        [] if singular is None else [singular]
    )


def test_an_entry_translated_for_another_rule_is_fitted_and_marked_for_review(tmp_path):
    document = open_document("de.po", catalogue_for(tmp_path, "de_DE"))
    assert document.texts == ["%d file", "%d files"]
    out = document.rebuild(["ONE %d", "MANY %d"], Languages("en", "ru"))
    msgfmt_check(tmp_path, out)
    catalogue = polib.pofile(out.decode())
    assert catalogue.metadata["Plural-Forms"].startswith("nplurals=3;")
    before = catalogue.find("%d page")
    assert before.msgstr_plural == {0: "one %d", 1: "many %d", 2: "many %d"}
    assert "fuzzy" in before.flags


def test_a_catalogue_made_for_the_target_keeps_its_own_rule(tmp_path):
    po = catalogue_for(tmp_path, "de_DE").replace(b"Language: de", b"Language: ar")
    document = open_document("ar.po", po)
    out = document.rebuild(["ONE %d", "MANY %d"], Languages("en", "ar"))
    catalogue = polib.pofile(out.decode())
    assert catalogue.metadata["Plural-Forms"].startswith("nplurals=2;")  # the translators' choice
    assert catalogue.find("%d file").msgstr_plural == {0: "ONE %d", 1: "MANY %d"}
    assert "fuzzy" not in catalogue.find("%d page").flags
