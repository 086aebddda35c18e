"""Parity of the language-conditioned methods (LMS + FD, LAA + LEE): the bundle stores their
tensors per language, a fusion rule folds them into one route's dense weights, and the
CTranslate2 engine of that route decodes as the PyTorch model does (greedy tokens identical,
per-token log-probs within 1e-3), as tests/test_parity.py checks for the base model."""

from __future__ import annotations

import pytest

from lsmt_bundle import load_bundle
from lsmt_core.routes import Route
from tests.bundles import TinyBundle
from tests.parity import assert_engine_matches_pytorch as check_parity
from tests.parity import variant_trainer
from training.model.lms import SHARED_PATH

pytestmark = pytest.mark.slow

VARIANTS = {
    # pair-wise with Fuse Distillation: exported as FD-LS and as FD-share
    "lms-pair-fd": dict(lms={"rank": 4, "fuse_distill": True, "init_std": 0.1}),
    "lms-language-attention-postnorm-gelu": dict(
        lms={"rank": 4, "synthesis": "language", "attention": True, "init_std": 0.1},
        pre_norm=False,
        activation="gelu",
    ),
    "laa-all-places-lee-all-points": dict(
        laa={
            "places": ["encoder_self", "decoder_self", "decoder_cross"],
            "init_std": 0.02,
            "lee_points": [1, 2, 3, 4, 5, 6],
        }
    ),
    "laa-dec-self-lee-45-postnorm": dict(
        laa={"places": ["decoder_self"], "lee_points": [4, 5]}, pre_norm=False
    ),
}
ROUTES = [("de", "en"), ("en", "fr")]
# Updates per variant. The post-norm LAA model (its LAA and LEE start at zero: a post-norm base
# model) trains slowly at the tiny models' learning rate; at 400 updates it still emitted a
# handful of pieces on some machines (the parity check then refuses to judge it).
STEPS = {name: 700 if name == "laa-dec-self-lee-45-postnorm" else 400 for name in VARIANTS}


@pytest.fixture(scope="module")
def train_variant(tmp_path_factory):
    def paths(name: str) -> tuple[str, ...]:  # Fuse Distillation: both export paths
        return ("ls", "shared") if VARIANTS[name].get("lms", {}).get("fuse_distill") else ("ls",)

    return variant_trainer(tmp_path_factory, VARIANTS, steps=STEPS.get, lms_paths=paths)


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def trained(request, train_variant) -> TinyBundle:
    return train_variant(request.param)


@pytest.fixture(scope="module")
def fd_trained(train_variant) -> TinyBundle:
    return train_variant("lms-pair-fd")


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r[0]}-{r[1]}")
def test_fused_engine_matches_pytorch(trained: TinyBundle, route):
    check_parity(trained, route)


def test_fd_share_one_engine_for_every_route_matches_pytorch_shared_path(fd_trained: TinyBundle):
    trained = fd_trained
    assert trained.model.cfg.lms.fuse_distill
    share = TinyBundle(trained.path.with_name("bundle-shared"), trained.model, trained.sp,
                       trained.verses, trained.routes)  # fmt: skip
    bundle, ls_bundle = load_bundle(share.path), load_bundle(trained.path)
    keys = {bundle.engine_key(r) for r in bundle.routes}
    assert keys == {"tiny:shared"}, keys  # the key shows it: one engine, shared module only
    assert len({ls_bundle.engine_key(r) for r in ls_bundle.routes}) == len(ls_bundle.routes)
    assert not any(p.startswith("modules/src") for p in bundle.manifest.files)
    for route in ROUTES:
        check_parity(share, route, lms_path=SHARED_PATH)
    # the two paths really differ (else the share test would prove nothing)
    a = bundle.assemble(Route("de", "en")).weights["encoder.layers.0.ffn.fc1.weight"]
    b = ls_bundle.assemble(Route("de", "en")).weights["encoder.layers.0.ffn.fc1.weight"]
    assert abs(a - b).max() > 1e-3


def test_bundle_stores_one_module_per_language_and_index(trained: TinyBundle):
    """Storage stays O(languages): factors/matrices per language, never a matrix per pair."""
    bundle = load_bundle(trained.path)
    langs = ("de", "en", "fr")
    modules = {p for p in bundle.manifest.files if p.startswith("modules/")}
    indices = ("src", "tgt") if trained.model.cfg.lms.rank else ("tgt",)
    want = {"modules/shared.safetensors"}
    want |= {f"modules/{i}/{lang}.safetensors" for i in indices for lang in langs}
    assert modules == want
    for lang in langs:
        names = set(bundle.read_module(f"tgt/{lang}"))
        assert names and all(".lms_" in n or n in ("laa.weight", "lee.weight") for n in names)
    dense = bundle.assemble(Route("de", "en")).weights
    assert not [n for n in dense if ".lms_" in n or n.startswith(("laa.", "lee."))]
