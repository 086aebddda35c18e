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
