"""Ready models read as routes (lsmt_bundle.packages): Argos packages, zipped or unpacked, and
CTranslate2 model folders with a description; what a broken one is refused for."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from lsmt_bundle import BundleError, load_bundle
from lsmt_bundle.packages import (
    MODEL_DESCRIPTION,
    UNBOUNDED_POSITIONS,
    is_model_source,
    open_model_package,
    open_model_packages,
    position_rows,
)
from lsmt_core.routes import Route

DEFAULT = Path(__file__).resolve().parents[1] / "models" / "default"


def unpacked(argos_zips: Path, name: str, into: Path) -> Path:
    """A package unpacked as argospm installs it: ``into/<name>/``."""
    with zipfile.ZipFile(argos_zips / f"{name}.argosmodel") as zf:
        zf.extractall(into)
    return into / name


def test_a_zipped_package_reads_as_one_route_with_the_bundles_position_limit(argos_zips):
    package = open_model_package(argos_zips / "default-en_fr.argosmodel")
    assert package is not None and package.kind == "argos"
    assert (package.name, package.routes, package.languages) == (
        "default-en_fr",
        [("en", "fr")],
        ["en", "fr"],
    )
    # the model's config adds <2fr> and </s> to every source: two of the table's rows
    max_positions = load_bundle(DEFAULT).max_source_positions
    assert position_rows(package.model_dir / "model.bin") == max_positions
    assert package.max_source_positions == max_positions - 2
    assert package.source_pieces(["▁Hello", "."], Route("en", "fr")) == ["▁Hello", "."]
    assert package.engine_key(Route("en", "fr")) == "default-en_fr:model"
    assert package.provenance["package_version"] == "1.0"
    assert "public domain" in package.provenance["license"]
    model_bytes = (package.model_dir / "model.bin").stat().st_size
    assert package.route_bytes(Route("en", "fr")) == model_bytes
    with pytest.raises(BundleError, match="not offered"):
        package.engine_key(Route("fr", "en"))


def test_a_folder_serves_zipped_and_unpacked_packages_and_skips_other_files(argos_zips, tmp_path):
    folder = tmp_path / "packages"
    folder.mkdir()
    shutil.copy(argos_zips / "default-en_fr.argosmodel", folder)
    unpacked(argos_zips, "default-fr_en", folder)
    (folder / "notes.txt").write_text("not a package")
    assert is_model_source(folder) and not is_model_source(DEFAULT)
    errors: list = []
    packages = open_model_packages(folder, lambda p, e: errors.append((p, e)))
    assert [p.name for p in packages] == ["default-en_fr", "default-fr_en"] and not errors


def test_a_model_file_changed_after_opening_is_named_when_its_engine_opens(argos_zips, tmp_path):
    package = open_model_package(unpacked(argos_zips, "default-en_fr", tmp_path))
    assert package is not None
    package.check_files()  # as opened
    assert package.check_sizes() == {}
    model = package.model_dir / "model.bin"
    data = bytearray(model.read_bytes())
    data[-1] ^= 0xFF  # same size, other contents
    model.write_bytes(bytes(data))
    with pytest.raises(BundleError, match=r"model/model\.bin changed since the server opened it"):
        package.open_engine(lambda *a, **k: pytest.fail("opened a changed model"))
    model.unlink()
    assert package.check_sizes() == {"model/model.bin": "missing"}


def test_a_ctranslate2_folder_with_a_description_is_a_route(argos_zips, tmp_path):
    package = unpacked(argos_zips, "default-en_fr", tmp_path / "argos")
    folder = tmp_path / "opus-en-fr"
    shutil.copytree(package / "model", folder)
    shutil.copy(package / "sentencepiece.model", folder / "source.spm")
    description = {"source": "en", "target": "fr", "source_tokenizer": "source.spm",
                   "description": "converted", "license": "CC-BY 4.0"}  # fmt: skip
    (folder / MODEL_DESCRIPTION).write_text(json.dumps(description))
    model = open_model_package(folder)
    assert model is not None and model.kind == "ctranslate2"
    assert model.tokenizer_path_of("fr") == model.tokenizer_path_of("en") == folder / "source.spm"
    assert model.provenance == {"description": "converted", "license": "CC-BY 4.0"}
    assert model.max_source_positions == load_bundle(DEFAULT).max_source_positions - 2


def broken_packages(argos_zips: Path, folder: Path) -> dict[str, str]:
    """A folder of broken packages beside a good one: package name -> what its reason says."""
    good = unpacked(argos_zips, "default-en_fr", folder / "tmp")
    cases = {
        "no-tokenizer": lambda p: (p / "sentencepiece.model").unlink(),
        "bpe": lambda p: (p / "sentencepiece.model").rename(p / "bpe.model"),
        "bad-json": lambda p: (p / "metadata.json").write_text("{not json"),
        "no-model": lambda p: shutil.rmtree(p / "model"),
        "prefix": lambda p: _edit(p, target_prefix="__fr__"),
        "bad-code": lambda p: _edit(p, to_code="French!"),
        "same": lambda p: _edit(p, to_code="en"),
    }
    for name, breaks in cases.items():
        shutil.copytree(good, folder / name)
        breaks(folder / name)
    (folder / "not-a-zip.argosmodel").write_bytes(b"PK but no")
    shutil.copytree(good, folder / "good")
    shutil.rmtree(folder / "tmp")
    return {
        "no-tokenizer": "sentencepiece.model missing",
        "bpe": "only SentencePiece packages are served",
        "bad-json": "metadata.json is not valid JSON",
        "no-model": "model/model.bin missing",
        "prefix": "target_prefix '__fr__' packages are not served",
        "bad-code": "to_code must be a language code",
        "same": "source and target are both 'en'",
        "not-a-zip.argosmodel": "not a zip file",
    }


def _edit(package: Path, **changes: str) -> None:
    meta = json.loads((package / "metadata.json").read_text())
    (package / "metadata.json").write_text(json.dumps({**meta, **changes}))


def test_each_broken_package_gets_its_reason_and_the_rest_opens(argos_zips, tmp_path):
    want = broken_packages(argos_zips, tmp_path)
    errors: dict[str, str] = {}
    packages = open_model_packages(tmp_path, lambda p, e: errors.update({p.name: str(e)}))
    assert [p.name for p in packages] == ["good"]
    assert set(errors) == set(want)
    for name, reason in want.items():
        assert reason in errors[name], (name, errors[name])


def test_a_model_without_a_position_table_is_bounded_by_ctranslate2s_default(tmp_path):
    import numpy as np
    from ctranslate2.specs import model_spec

    # The smallest spec that serialises: one variable, no position table.
    class Spec(model_spec.LayerSpec):
        def __init__(self):
            self.weight = np.zeros((3, 4), dtype=np.float32)

    class Model(model_spec.ModelSpec):
        def __init__(self):
            super().__init__()
            self.layer = Spec()

        @property
        def name(self):
            return "Toy"

    model = Model()
    model.validate()  # the numpy arrays become the variables _serialize writes
    model._serialize(str(tmp_path / "model.bin"))
    assert position_rows(tmp_path / "model.bin") == UNBOUNDED_POSITIONS
