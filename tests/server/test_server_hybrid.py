"""A hybrid bundle (Transformer encoder + LSTM decoder) served end to end: the registry loads
its routes as hybrid engines, and the API, batching, metrics and engine listing are those of
any bundle."""

from __future__ import annotations

import pytest

from lsmt_bundle import load_bundle
from lsmt_bundle.engines import load_engine
from lsmt_bundle.hybrid import HybridTranslator
from lsmt_core.routes import Route
from server.bundles import ServedBundle

pytestmark = pytest.mark.integration

SENTENCES = [
    "And Jesus said unto them, Follow me.",
    "And he said unto them, Go ye into all the world, and preach the gospel.",
]


def test_hybrid_bundle_translates_as_its_engine_does(make_server, hybrid_bundle, tmp_path):
    srv = make_server(bundle_dirs=[hybrid_bundle], engine_cache_dir=tmp_path / "cache")
    with srv.client() as c:
        r = c.post(
            "/v1/translate",
            json={"text": SENTENCES, "source": "en", "target": "fr", "beam_size": 2},
        )
        assert r.status_code == 200, r.text
        served_out = [t["text"] for t in r.json()["translations"]]
        models = c.get("/v1/models").json()
        metrics = c.get("/metrics").text
    engines = [e for e in models["engines"] if e["state"] == "loaded"]
    assert len(engines) == 1 and engines[0]["bytes"] > 0
    loaded = next(iter(srv.state.registry.slots.values()))
    assert isinstance(loaded.translator, HybridTranslator)
    assert loaded.twin.engine is None  # short requests only: no bulk twin
    assert "lsmt_engine_loads_total" in metrics
    # The same sentences straight through an engine built from the bundle: same text.
    served = ServedBundle(load_bundle(hybrid_bundle))
    route = Route("en", "fr")
    engine, _ = load_engine(served.bundle.assemble(route), compute_type="int8")
    results = engine.translate_batch([served.encode(s, route) for s in SENTENCES], beam_size=2)
    assert served_out == [served.decode(res.hypotheses[0], "fr") for res in results]
    assert any((tmp_path / "cache").iterdir())  # the engine cache keeps hybrid engines too
