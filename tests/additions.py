"""What the language-addition tests share: a bundle's routes read, decoded and written as the
server does, a bundle grown by ``model_export add-language``, and greedy parity between an
added language's routes through CTranslate2 and the addition's PyTorch model."""

from __future__ import annotations

from pathlib import Path

import torch

from lsmt_bundle import load_bundle
from lsmt_bundle.engines import load_engine
from model_export.__main__ import main as model_export_main
from server.bundles import ServedBundle
from tests.bundles import file_digests
from training.checkpoint import load_model
from training.model import Route
from training.search import greedy_search

MAX_LEN = 24


def served_beams(bundle_dir: Path, route: Route, texts: list[str]) -> list:
    """(pieces, score) of each text's best of 2 beams through the bundle's float32 engine for
    ``route``, each language read with its own tokenizer (``ServedBundle``)."""
    served = ServedBundle(load_bundle(bundle_dir))
    translator, _ = load_engine(served.bundle.assemble(route), compute_type="float32")
    results = translator.translate_batch(
        [served.encode(t, route) for t in texts],
        beam_size=2,
        return_scores=True,
        max_decoding_length=MAX_LEN,
    )
    return [(r.hypotheses[0], round(r.scores[0], 5)) for r in results]


def grow(bundle_dir: Path, run: Path, en: list[str]) -> tuple[dict[str, str], list]:
    """Add ``run``'s languages to ``bundle_dir`` (its last checkpoint); the bundle's files and
    its en->fr translations of ``en`` from before."""
    before, en_fr = file_digests(bundle_dir), served_beams(bundle_dir, Route("en", "fr"), en)
    model_export_main(["add-language", str(bundle_dir), "--from", str(run), "--which", "last"])
    return before, en_fr


def assert_decodes_as_trained(
    bundle_dir: Path, run: Path, route: Route, texts: list[str]
) -> list[list[int]]:
    """Greedy through the bundle's engine == greedy in the run's PyTorch model (last
    checkpoint), in each side's own ids and text; the target ids decoded."""
    model, _, _ = load_model(run, which="last")
    served = ServedBundle(load_bundle(bundle_dir))
    translator, _ = load_engine(served.bundle.assemble(route), compute_type="float32")
    src_sp, tgt_sp = served.tokenizer(route[0]), served.tokenizer(route[1])
    decoded = []
    for text in texts:
        pieces = served.encode(text, route)
        got = translator.translate_batch([pieces], beam_size=1, max_decoding_length=MAX_LEN)
        ids = torch.tensor([[src_sp.piece_to_id(p) for p in pieces]])
        want = greedy_search(model, ids, route, max_len=MAX_LEN)[0]
        assert [tgt_sp.piece_to_id(p) for p in got[0].hypotheses[0]] == want.tokens
        assert served.decode(got[0].hypotheses[0], route[1]) == tgt_sp.decode(want.tokens)
        decoded.append(want.tokens)
    return decoded
