"""A corpus packed and unpacked (lsmt_text.data.pack): every file back byte for byte, the pack
smaller than the corpus, and a damaged pack or a used directory refused with nothing written."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest

from lsmt_text.data.__main__ import main
from lsmt_text.data.formats import CorpusFormatError
from lsmt_text.data.pack import pack, unpack


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def corpus(small_corpus, tmp_path) -> Path:
    """A copy of the small corpus, with a file of no final line break (stored as it is)."""
    out = tmp_path / "corpus"
    shutil.copytree(small_corpus, out)
    (out / "mono" / "xx.txt").write_bytes(b"no final line break")
    return out


def test_a_packed_corpus_unpacks_byte_for_byte(corpus, tmp_path):
    packed = tmp_path / "corpus.lsmtpack"
    assert main(["pack", str(corpus), "--out", str(packed)]) == 0
    size = sum(len(b) for b in _files(corpus).values())
    assert packed.stat().st_size < size / 4  # the parallel text and mono stored once
    assert main(["unpack", str(packed), "--out", str(tmp_path / "back")]) == 0
    assert _files(tmp_path / "back") == _files(corpus)
    with tarfile.open(packed, "r:xz") as tar:
        names = tar.getnames()
    assert "raw/mono/xx.txt" in names and "raw/manifest.json" in names
    assert any(n.startswith("lines/train/") for n in names)


def _damaged(packed: Path, out: Path) -> Path:
    """``packed`` with one line of one text file pointing at another distinct line."""
    with tarfile.open(packed, "r:xz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    name = next(n for n in members if n.startswith("lines/train/"))
    deltas = np.frombuffer(members[name], dtype="<i4").copy()
    deltas[1] += 1
    members[name] = deltas.tobytes()
    with tarfile.open(out, "w:xz") as tar:
        for n, data in members.items():
            info = tarfile.TarInfo(n)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out


def test_a_damaged_pack_or_a_used_directory_is_refused(corpus, tmp_path):
    packed = tmp_path / "corpus.lsmtpack"
    pack(corpus, packed)
    damaged = _damaged(packed, tmp_path / "damaged.lsmtpack")
    with pytest.raises(CorpusFormatError, match="does not match its recorded SHA-256"):
        unpack(damaged, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing written before every file is checked
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="not empty"):
        unpack(packed, used)
    assert main(["unpack", str(packed), "--out", str(used)]) == 2
    assert [p.name for p in used.iterdir()] == ["keep.txt"]
    with pytest.raises(CorpusFormatError, match="not a built corpus"):
        pack(tmp_path / "used", tmp_path / "x.lsmtpack")
