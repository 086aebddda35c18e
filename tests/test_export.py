"""Bundle export and assembly: storage per language, engine keys, vocabulary filtering, errors."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from lsmt_bundle import BundleError, load_bundle
from lsmt_bundle.ct2 import save_translator
from lsmt_bundle.engines import load_engine
from lsmt_core.routes import Route
from lsmt_core.target_vocab import select_target_vocab
from model_export.from_torch import export_bundle
from tests.bundles import TinyBundle, make_tiny_bundle

pytestmark = pytest.mark.slow

LANGS = ("de", "en", "fr")


@pytest.fixture(scope="module")
def separate(tmp_path_factory) -> TinyBundle:
    """Separate decoders, no LSL, filtered target vocabularies: one engine per target."""
    out = tmp_path_factory.mktemp("separate")
    return make_tiny_bundle(
        out, model_overrides=dict(decoder_sharing="separate"), target_vocab_size=180
    )


def test_modules_stored_once_per_language(separate: TinyBundle):
    modules = separate.path / "modules"
    assert (modules / "shared.safetensors").is_file()
    assert sorted(p.stem for p in (modules / "tgt").iterdir()) == sorted(LANGS)
    assert not (modules / "src").exists()  # nothing is source-indexed in this model


def test_routes_with_same_modules_share_engine_and_weights(separate: TinyBundle):
    bundle = load_bundle(separate.path)
    assert bundle.engine_key(Route("de", "fr")) == bundle.engine_key(Route("en", "fr"))
    assert bundle.engine_key(Route("de", "fr")) != bundle.engine_key(Route("de", "en"))
    a, b = bundle.assemble(Route("de", "fr")), bundle.assemble(Route("en", "fr"))
    assert a.weights.keys() == b.weights.keys()
    for name in a.weights:
        assert a.weights[name].tobytes() == b.weights[name].tobytes(), name
    assert a.target_vocab == b.target_vocab


def test_filtered_vocabulary_engine_matches_unfiltered(separate: TinyBundle, tmp_path):
    full_path = tmp_path / "full"
    export_bundle(
        separate.model,
        full_path,
        name="full",
        tokenizer_model=separate.path / "tokenizer/spm.model",
        routes=separate.routes,
        store_dtype="float32",
    )
    filtered, full = load_bundle(separate.path), load_bundle(full_path)
    compared = 0
    for src, tgt in [("de", "en"), ("en", "fr"), ("fr", "de")]:
        route = Route(src, tgt)
        dense = filtered.assemble(route)
        allowed = set(dense.target_vocab)
        assert len(allowed) < len(full.pieces) / 2  # the filter really removed rows
        small, _ = load_engine(dense, compute_type="float32")
        big, _ = load_engine(full.assemble(route), compute_type="float32")
        lines = separate.verses[src][:12]
        pieces = [separate.sp.encode(t, out_type=str) for t in lines]
        sources = [filtered.source_pieces(p, route) for p in pieces]
        for s, r_small, r_big in zip(
            sources,
            small.translate_batch(sources, beam_size=1, max_decoding_length=48),
            big.translate_batch(sources, beam_size=1, max_decoding_length=48),
            strict=True,
        ):
            out_big = r_big.hypotheses[0]
            assert set(r_small.hypotheses[0]) <= allowed
            if set(out_big) <= allowed:
                assert r_small.hypotheses[0] == out_big, s
                compared += 1
    assert compared >= 10, "too few outputs inside the filtered vocabulary to compare"


def test_select_target_vocab_keeps_specials_characters_and_top_pieces():
    pieces = ["<pad>", "<unk>", "<s>", "</s>", "<2fr>", "▁le", "▁la", "x", "▁rare", "▁", "é"]
    freqs = {"▁le": 50, "▁la": 40, "x": 1, "▁rare": 1, "▁": 9, "é": 3}
    ids = select_target_vocab(freqs, pieces, min_count=2, max_size=8, keep=("<2fr>",))
    kept = [pieces[i] for i in ids]
    assert kept == ["<pad>", "<unk>", "<s>", "</s>", "<2fr>", "▁le", "▁la", "x", "▁", "é"]
    assert "▁rare" not in kept  # below min_count and not a character
    few = select_target_vocab(freqs, pieces, min_count=1, max_size=0)
    assert "▁le" not in [pieces[i] for i in few]  # max_size caps the frequent pieces


def test_corrupt_module_fails_that_route_only(separate: TinyBundle, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(separate.path, copy)
    (copy / "modules/tgt/fr.safetensors").write_bytes(b"not a safetensors file")
    bundle = load_bundle(copy)
    with pytest.raises(BundleError, match="tgt/fr"):
        bundle.assemble(Route("de", "fr"))
    assert bundle.assemble(Route("de", "en")).weights  # other routes still assemble


def test_manifest_errors_are_clear(separate: TinyBundle, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(separate.path, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["routes"].append(["de", "xx"])
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="route de->xx"):
        load_bundle(copy)
    with pytest.raises(BundleError, match=r"no manifest\.json"):
        load_bundle(tmp_path / "nowhere")
    bundle = load_bundle(separate.path)
    with pytest.raises(BundleError, match="not offered"):
        bundle.assemble(Route("de", "de"))


def test_int8_engine_on_disk_is_smaller_and_translates(separate: TinyBundle, tmp_path):
    import ctranslate2

    dense = load_bundle(separate.path).assemble(Route("de", "en"))
    f32 = save_translator(dense, tmp_path / "f32", "float32")
    i8 = save_translator(dense, tmp_path / "i8", "int8")
    assert (i8 / "model.bin").stat().st_size < 0.6 * (f32 / "model.bin").stat().st_size
    translator = ctranslate2.Translator(str(i8), compute_type="int8")
    src = load_bundle(separate.path).source_pieces(
        separate.sp.encode(separate.verses["de"][0], out_type=str), Route("de", "en")
    )
    out = translator.translate_batch([src], beam_size=2, max_decoding_length=48, return_scores=True)
    assert out[0].hypotheses[0]
    assert np.isfinite(out[0].scores[0])


@pytest.mark.parametrize("store_dtype", ["float32", "float16", "int8"])
def test_storage_round_trip_within_its_error_bound(store_dtype):
    from lsmt_bundle.storage import decode, encode, max_error

    rng = np.random.default_rng(0)
    weights = {
        "w": rng.normal(size=(64, 32)).astype(np.float32),
        "b": rng.normal(size=(32,)).astype(np.float32),
        "zero": np.zeros((4, 4), np.float32),
        "ids": np.arange(10, dtype=np.int32),
    }
    stored = encode(weights, store_dtype)
    if store_dtype == "int8":
        assert stored["w"].dtype == np.int8 and stored["b"].dtype == np.float16
    back = decode(stored)
    assert set(back) == set(weights)
    np.testing.assert_array_equal(back["ids"], weights["ids"])
    bound = max_error(store_dtype, {k: v for k, v in weights.items() if k != "ids"})
    for name in ("w", "b", "zero"):
        assert back[name].dtype == np.float32
        assert np.abs(back[name] - weights[name]).max() <= bound + 1e-7
    if store_dtype == "float32":
        np.testing.assert_array_equal(back["w"], weights["w"])


def test_flipped_bytes_fail_the_route_and_verify_names_the_file(separate: TinyBundle, tmp_path):
    """Same size, different bytes: without checksums this served garbage with 200."""
    from model_export.__main__ import main as export_main

    copy = tmp_path / "bundle"
    shutil.copytree(separate.path, copy)
    assert export_main(["verify", str(copy)]) == 0
    module = copy / "modules/tgt/fr.safetensors"
    data = bytearray(module.read_bytes())
    data[-100] ^= 0xFF  # a weight byte: the file still parses
    module.write_bytes(bytes(data))
    bundle = load_bundle(copy)
    with pytest.raises(BundleError, match=r"tgt/fr\.safetensors: checksum mismatch"):
        bundle.assemble(Route("de", "fr"))
    assert bundle.assemble(Route("de", "en")).weights  # other routes still assemble
    assert bundle.verify()["modules/tgt/fr.safetensors"].startswith("checksum mismatch")
    assert export_main(["verify", str(copy)]) == 1
    # a manifest written before XXH3 was recorded: the same bytes caught by its SHA-256
    manifest = json.loads((copy / "manifest.json").read_text())
    assert all(set(d) == {"bytes", "sha256", "xxh3_128"} for d in manifest["files"].values())
    for record in manifest["files"].values():
        del record["xxh3_128"]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    old = load_bundle(copy)
    assert old.manifest.files["modules/shared.safetensors"].xxh3_128 is None
    assert old.verify()["modules/tgt/fr.safetensors"].startswith("checksum mismatch")
    assert old.verify()["modules/shared.safetensors"] == "ok"
    assert "xxh3_128" not in old.manifest.model_dump_json()  # and written back as it was


def test_every_written_file_has_a_digest_and_old_bundles_still_load(separate: TinyBundle, tmp_path):
    manifest = json.loads((separate.path / "manifest.json").read_text())
    written = {
        p.relative_to(separate.path).as_posix()
        for p in separate.path.rglob("*")
        if p.is_file() and p.name != "manifest.json"
    }
    assert set(manifest["files"]) == written
    for rel, d in manifest["files"].items():
        assert d["bytes"] == (separate.path / rel).stat().st_size
    # a bundle exported before checksums existed has no "files": it loads, unchecked
    copy = tmp_path / "old"
    shutil.copytree(separate.path, copy)
    del manifest["files"]
    (copy / "manifest.json").write_text(json.dumps(manifest))
    bundle = load_bundle(copy)
    assert bundle.verify() == {} and bundle.assemble(Route("de", "en")).weights


def test_bundle_evaluation_records_and_applies_the_decoding_guards(added_language, tmp_path):
    """``python -m model_export.evaluate`` with the server's guards: recorded in the results,
    and they change what a tiny (looping) model emits."""
    from model_export.evaluate import main as evaluate_main

    bundle = added_language[2]
    outs = {}
    for name, guards in (("off", []), ("on", ["--repetition-penalty", "1.5",
                                              "--no-repeat-ngram-size", "2"])):  # fmt: skip
        out = tmp_path / f"{name}.json"
        args = [str(bundle), "--testset", "ntrex", "--routes", "en-fr", "--max-sentences", "4",
                "--beam", "1", "--no-langid", "--out", str(out), *guards]  # fmt: skip
        assert evaluate_main(args) == 0
        outs[name] = json.loads(out.read_text())
    assert outs["off"]["repetition_penalty"] == 1.0 and outs["off"]["no_repeat_ngram_size"] == 0
    assert outs["on"]["repetition_penalty"] == 1.5 and outs["on"]["no_repeat_ngram_size"] == 2
    assert outs["on"]["directions"]["en-fr"]["chrf"] != outs["off"]["directions"]["en-fr"]["chrf"]


def test_int8_routes_build_their_engine_without_a_float32_round_trip():
    """A route of an int8 bundle assembled in its stored int8 (no dequantise/requantise)
    builds the engine the float32 path builds, byte for byte: the shipped default model, LSL
    with per-target vocabularies; other quantizations and fusions that compute on weights
    take the float32 path."""
    from pathlib import Path

    from lsmt_bundle import ct2
    from lsmt_bundle.assembly import keeps_int8
    from lsmt_bundle.dense import EMBEDDING, OUTPUT_PROJECTION
    from lsmt_core.manifest import LowRankSum

    bundle = load_bundle(Path(__file__).resolve().parents[1] / "models" / "default")
    assert bundle.manifest.store_dtype == "int8" and keeps_int8(bundle.manifest)
    for route in [Route("en", "fr"), Route("ar", "es")]:
        as_stored = bundle.assemble(route, keep_int8=True)
        assert as_stored.weights[EMBEDDING].dtype == np.int8
        # the per-target vocabulary slice took whole int8 rows, and their scales
        rows = len(as_stored.target_vocab)
        assert as_stored.row_scales[OUTPUT_PROJECTION].shape[0] == rows
        built = ct2.translator_files(as_stored, "int8")["model.bin"]
        assert built == ct2.translator_files(bundle.assemble(route), "int8")["model.bin"]
    fp16 = ct2.translator_files(bundle.assemble(Route("en", "fr"), keep_int8=True), "int8_float16")
    assert (
        fp16["model.bin"]
        == ct2.translator_files(bundle.assemble(Route("en", "fr")), "int8_float16")["model.bin"]
    )
    lms = bundle.manifest.model_copy(update={"fusions": [LowRankSum(linears=["x"])]})
    assert not keeps_int8(lms)
