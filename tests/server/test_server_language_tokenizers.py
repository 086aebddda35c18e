"""A language with a tokenizer of its own (``Manifest.language_tokenizers``): its pieces are its
vocabulary on both sides, its modules hold its embeddings, and an assembled route is a plain
engine whose source and target vocabularies differ.

The check that needs no training: the default model with French given its own tokenizer that
is the bundle's with the ordinary pieces shuffled (the same segmentation, other ids), and
French's embeddings the bundle's rows in that order. Every route must translate exactly as
before (same tokens, same scores) through the server's own tokenization, assembly in the
stored int8, the per-target vocabulary slice and the engine cache; the engines of the routes
with French must have its vocabulary; old readers' manifests stay as they were; a damaged
language tokenizer is refused with its name."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from lsmt_bundle import BundleError, load_bundle
from lsmt_bundle.engines import load_engine
from lsmt_bundle.store import MANIFEST, digest, module_path
from lsmt_core.manifest import (
    VOCABULARY_GROUPS,
    Manifest,
    TokenizerInfo,
    language_tokenizer_path,
)
from lsmt_core.routes import Route
from server.bundles import ServedBundle

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "models" / "default"
SENTENCES = {
    "en": ["Where is the train station?", "The meeting starts at nine tomorrow morning."],
    "fr": ["Où est la gare ?", "La réunion commence demain à neuf heures."],
}
ROUTES = [("en", "fr"), ("fr", "en"), ("fr", "es"), ("en", "es")]


def shuffled_tokenizer(model: Path, out: Path, seed: int = 0) -> np.ndarray:
    """Write ``model`` with its ordinary pieces in another order; returns ``order``: new id
    -> old id (special, tag and byte pieces keep their ids)."""
    from sentencepiece import sentencepiece_model_pb2 as sp_pb2

    proto = sp_pb2.ModelProto()
    proto.ParseFromString(model.read_bytes())
    normal = [
        i for i, p in enumerate(proto.pieces) if p.type == sp_pb2.ModelProto.SentencePiece.NORMAL
    ]
    order = np.arange(len(proto.pieces))
    order[normal] = np.random.default_rng(seed).permutation(normal)
    pieces = [sp_pb2.ModelProto.SentencePiece() for _ in order]
    for new, old in enumerate(order):
        pieces[new].CopyFrom(proto.pieces[int(old)])
    del proto.pieces[:]
    proto.pieces.extend(pieces)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(proto.SerializeToString())
    return order


def give_own_tokenizer(bundle: Path, lang: str) -> np.ndarray:
    """Give ``lang`` of the bundle at ``bundle`` (changed in place) its own, shuffled
    tokenizer and the embeddings in that order, as an exporter would write them."""
    manifest = Manifest.model_validate_json((bundle / MANIFEST).read_text())
    rel = language_tokenizer_path(lang)
    order = shuffled_tokenizer(bundle / manifest.tokenizer.path, bundle / rel)
    inverse = np.argsort(order)  # old id -> new id
    shared = load_file(module_path(bundle, "shared"))
    embedding = {k[len("embed_tokens.weight") :]: v for k, v in shared.items()
                 if k.startswith("embed_tokens.weight")}  # fmt: skip
    for index, name in (
        ("src", "source_embed_tokens.weight"),
        ("tgt", "target_embed_tokens.weight"),
    ):
        path = module_path(bundle, f"{index}/{lang}")
        module = load_file(path) if path.exists() else {}
        for suffix, value in embedding.items():  # the matrix and, stored in int8, its scales
            module[name + suffix] = np.ascontiguousarray(value[order])
        if index == "tgt" and "target_vocab.ids" in module:  # the same pieces, their new ids
            module["target_vocab.ids"] = inverse[module["target_vocab.ids"]].astype(
                module["target_vocab.ids"].dtype
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file(module, str(path))
        manifest.files[path.relative_to(bundle).as_posix()] = digest(path.read_bytes())
    manifest.language_tokenizers[lang] = TokenizerInfo(path=rel, vocab_size=len(order))
    manifest.files[rel] = digest((bundle / rel).read_bytes())
    manifest.weight_groups += [g for g in VOCABULARY_GROUPS if g not in manifest.weight_groups]
    (bundle / MANIFEST).write_text(manifest.model_dump_json(indent=2) + "\n")
    return order


@pytest.fixture(scope="module")
def french_own(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("own") / "default"
    shutil.copytree(DEFAULT, out)
    give_own_tokenizer(out, "fr")
    return out


def vocabulary(sp) -> list[str]:
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


def translate(served: ServedBundle, src: str, tgt: str) -> list[tuple[str, list[str], float]]:
    route = Route(src, tgt)
    engine, _ = load_engine(served.bundle.assemble(route, keep_int8=True), compute_type="int8")
    sources = [served.encode(s, route) for s in SENTENCES[src]]
    results = engine.translate_batch(sources, beam_size=2, return_scores=True)
    return [
        (served.decode(r.hypotheses[0], tgt), r.hypotheses[0], round(r.scores[0], 4))
        for r in results
    ]


def test_a_shuffled_own_vocabulary_translates_exactly_as_the_shared_one(french_own):
    before = ServedBundle(load_bundle(DEFAULT))
    after = ServedBundle(load_bundle(french_own))
    assert before.bundle.manifest.store_dtype == "int8"  # the scales move with their rows
    # the same pieces, in another order
    fr_size = after.bundle.manifest.language_tokenizers["fr"].vocab_size
    assert fr_size == before.bundle.manifest.tokenizer.vocab_size
    assert after.pieces("La gare", "fr") == before.pieces("La gare", "fr")  # same segmentation
    fr, en = after.tokenizer("fr"), after.tokenizer("en")  # but French read with its own ids
    assert vocabulary(fr) == after.bundle.pieces_of("fr")
    assert vocabulary(en) == after.bundle.pieces != vocabulary(fr)
    for src, tgt in ROUTES:
        assert translate(after, src, tgt) == translate(before, src, tgt), (src, tgt)
    # The routes with French read its modules and have its vocabulary, not the bundle's.
    en_fr = after.bundle.assemble(Route("en", "fr"), keep_int8=True)
    fr_en = after.bundle.assemble(Route("fr", "en"), keep_int8=True)
    assert "src/fr" in fr_en.modules and "tgt/fr" in en_fr.modules
    assert fr_en.source_vocab == after.bundle.pieces_of("fr") != after.bundle.pieces
    assert en_fr.source_vocab == after.bundle.pieces
    assert set(en_fr.target_vocab) == set(before.bundle.assemble(Route("en", "fr")).target_vocab)
    assert "src/es" not in after.bundle.modules_for(Route("en", "es"))  # others read what they did


def test_manifests_without_language_tokenizers_are_written_as_before(french_own):
    text = (DEFAULT / MANIFEST).read_text()
    # the manifest's own field is left out when no language has a tokenizer of its own (the
    # recipe in its provenance may still name the empty setting)
    assert "language_tokenizers" not in json.loads(text)
    assert Manifest.model_validate_json(text).model_dump_json(indent=2) + "\n" == text
    data = json.loads((french_own / MANIFEST).read_text())
    assert data["language_tokenizers"]["fr"]["path"] == "tokenizers/fr/spm.model"
    with pytest.raises(ValueError, match="weight groups of their embeddings"):
        Manifest.model_validate({**data, "weight_groups": data["weight_groups"][:1]})
    with pytest.raises(ValueError, match="languages the bundle lacks"):
        Manifest.model_validate(
            {**data, "language_tokenizers": {"de": data["language_tokenizers"]["fr"]}}
        )


def test_a_damaged_language_tokenizer_is_refused_by_name(french_own, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(french_own, broken)
    model = broken / "tokenizers" / "fr" / "spm.model"
    model.write_bytes(model.read_bytes()[:-10])
    with pytest.raises(BundleError, match=re.escape("tokenizers/fr/spm.model")):
        load_bundle(broken)


@pytest.mark.integration
def test_the_server_reads_and_writes_french_with_its_own_tokenizer(
    make_server, french_own, tmp_path
):
    srv = make_server(
        bundle_dirs=[french_own], engine_cache_dir=tmp_path / "cache", output_checks=False
    )
    expected = {
        (src, tgt): [text for text, _, _ in translate(ServedBundle(load_bundle(DEFAULT)), src, tgt)]
        for src, tgt in [("en", "fr"), ("fr", "en")]
    }
    with srv.client() as c:
        for (src, tgt), want in expected.items():
            body = {"text": SENTENCES[src], "source": src, "target": tgt, "beam_size": 2}
            r = c.post("/v1/translate", json=body)
            assert r.status_code == 200, r.text
            assert [t["text"] for t in r.json()["translations"]] == want
    assert len(list((tmp_path / "cache").iterdir())) >= 2  # both engines cached
