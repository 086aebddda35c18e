"""The cluster's bookkeeping without Ray running: hot keys spread to an idle translator
(server.cluster_balance), and the hub's view of the replicas, where a departed replica's
counters stay and its gauges go (server.cluster_metrics). The same on a real local Ray:
test_server_cluster.py."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client import Counter as PromCounter
from prometheus_client.parser import text_string_to_metric_families

from lsmt_core.routes import route_key
from server import cluster_metrics
from server.bundles import load_served_bundle
from server.cluster_balance import KeySpreader, copy_id
from server.cluster_metrics import MetricsHub, ReplicaReport, merge_engines, merge_expositions
from server.schemas import EngineInfo


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def route_traffic(spreader: KeySpreader, where: dict[str, str], requests: list[str]) -> None:
    """Each request takes the id the spreader gives and lands where that id lives (as Serve's
    multiplexing routes it: ``where`` maps a model id to its replica)."""
    for key in requests:
        spreader.clock.now += 0.1  # type: ignore[attr-defined]
        model_id = spreader.model_id(key)
        spreader.record(where[model_id], key, model_id)


def test_a_replacement_that_idles_gets_copies_of_the_survivors_hot_keys():
    """Four keys, all on the survivor after a kill: one decision copies as many of its
    hottest keys as bring it within 60/40 by prediction, and the shares measured on the next
    window are within the bound, so nothing more is copied."""
    clock = Clock()
    spreader = KeySpreader(window_s=30.0, clock=clock)
    where = {k: "survivor" for k in ("de", "fr", "es", "it")}
    traffic = ["de"] * 4 + ["fr"] * 3 + ["es"] * 2 + ["it"] * 1  # shares 40/30/20/10 %
    route_traffic(spreader, where, traffic * 10)
    translators = {"survivor", "replacement"}
    assert spreader.rebalance(translators) == ["de", "fr", "es"]
    assert spreader.ids == {k: [k, copy_id(k, 1)] for k in ("de", "fr", "es")}
    # a copy no replica holds goes to the one with the fewest keys: the replacement
    where |= {copy_id(k, 1): "replacement" for k in ("de", "fr", "es")}
    clock.now += 31
    route_traffic(spreader, where, traffic * 30)
    shares = spreader.shares(translators)
    assert shares["replacement"] / sum(shares.values()) == pytest.approx(0.45, abs=0.02)
    assert spreader.rebalance(translators) == []  # within 60/40: left alone


def test_balanced_traffic_and_a_lone_translator_change_nothing():
    spreader = KeySpreader(window_s=30.0, clock=Clock())
    route_traffic(spreader, {"de": "a", "fr": "b"}, ["de", "fr"] * 20)
    assert spreader.rebalance({"a"}) == []  # one translator: nowhere to spread
    spreader.clock.now += 30  # type: ignore[attr-defined]
    assert spreader.rebalance({"a", "b"}) == []  # 50/50


def test_a_copy_placed_beside_its_key_is_placed_anew():
    """While its peer was being replaced, a's only company was the dead replica's last
    report: the copy of de went to a, beside de. Once b is live, the copy is renamed, and
    Serve places the fresh id on b."""
    clock = Clock()
    spreader = KeySpreader(window_s=30.0, clock=clock)
    route_traffic(spreader, {"de": "a"}, ["de"] * 40)
    assert spreader.rebalance({"a", "dead"}) == ["de"]
    where = {"de": "a", "de~1": "a"}  # Serve had a alone
    route_traffic(spreader, where, ["de"] * 40)
    assert spreader.rebalance({"a", "b"}) == []  # judged on a window of the new routing only
    clock.now += 30
    assert spreader.rebalance({"a", "b"}) == ["de"]
    assert spreader.ids == {"de": ["de", "de~2"]}
    where["de~2"] = "b"
    route_traffic(spreader, where, ["de"] * 40)
    assert spreader.shares({"a", "b"}) == {"a": 20, "b": 20}  # the window since the change
    clock.now += 30
    assert spreader.rebalance({"a", "b"}) == []


def test_few_requests_say_nothing():
    spreader = KeySpreader(window_s=30.0, clock=Clock())
    route_traffic(spreader, {"de": "a"}, ["de"] * 5)
    assert spreader.rebalance({"a", "b"}) == []


def test_a_keys_ids_take_turns():
    spreader = KeySpreader(clock=Clock())
    spreader.ids["de"] = ["de", "de~1", "de~2"]
    assert [spreader.model_id("de") for _ in range(4)] == ["de", "de~1", "de~2", "de"]
    assert spreader.model_id("fr") == "fr"


def exposition(loads: float, resident: float) -> str:
    registry = CollectorRegistry()
    PromCounter("lsmt_engine_loads", "loads", registry=registry).inc(loads)
    Gauge("lsmt_engine_resident", "resident", registry=registry).set(resident)
    return generate_latest(registry).decode()


def samples(text: bytes) -> dict[tuple[str, str], float]:
    return {
        (s.name, s.labels["replica"]): s.value
        for f in text_string_to_metric_families(text.decode())
        for s in f.samples
        if not s.name.endswith("_created")
    }


def test_a_departed_replicas_counters_stay_and_its_gauges_go(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(cluster_metrics.time, "monotonic", lambda: now[0])
    hub = MetricsHub.func_or_class()
    hub.report("T#a", ReplicaReport(exposition(3, 1), translator=True))
    hub.report("T#b", ReplicaReport(exposition(5, 1), translator=True))
    assert hub.translators() == {"T#a", "T#b"}
    now[0] = 20.0
    hub.report("T#b", ReplicaReport(exposition(6, 1), translator=True))
    assert hub.translators() == {"T#b"}  # a is not heard from: not counted as idle
    now[0] = 31.0
    merged = samples(merge_expositions({r: x.exposition for r, x in hub.collect().items()}))
    assert merged == {
        ("lsmt_engine_loads_total", "T#a"): 3.0,  # departed: the sum of loads never drops
        ("lsmt_engine_loads_total", "T#b"): 6.0,
        ("lsmt_engine_resident", "T#b"): 1.0,  # a's gauge is gone with it
    }
    assert [r.translator for r in hub.collect().values()] == [False, True]
    hub.report("T#a", ReplicaReport(exposition(4, 1), translator=True))  # alive after all
    assert set(hub.collect()) == {"T#a", "T#b"} and not hub.departed


def test_the_hub_keeps_a_bounded_number_of_departed_replicas(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(cluster_metrics.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(cluster_metrics, "MAX_DEPARTED", 2)
    hub = MetricsHub.func_or_class()
    for i in range(4):
        hub.report(f"T#{i}", ReplicaReport(exposition(i, 1)))
        now[0] += 1
    now[0] += 60
    assert list(hub.collect()) == ["T#2", "T#3"]


def test_the_hubs_engine_reports_carry_the_translators_engines_alone(monkeypatch):
    """What ``/v1/models`` asks the hub for: live translators' engines and bytes, no
    exposition (a departed replica's counters and the ingress are ``collect``'s business)."""
    now = [0.0]
    monkeypatch.setattr(cluster_metrics.time, "monotonic", lambda: now[0])
    hub = MetricsHub.func_or_class()
    hub.report("T#a", ReplicaReport(exposition(3, 1), [engine("k", "T#a", 7)], 7, 0, True))
    hub.report("T#gone", ReplicaReport(exposition(1, 1), [engine("k", "T#gone", 7)], 7, 0, True))
    now[0] = 20.0
    hub.report("T#a", ReplicaReport(exposition(4, 1), [engine("k", "T#a", 7)], 7, 0, True))
    hub.report("Ingress#x", ReplicaReport(exposition(0, 0)))
    now[0] = 31.0  # T#gone silent for 31 s: departed
    reports = hub.engine_reports()
    assert list(reports) == ["T#a"]
    assert reports["T#a"].exposition == ""
    assert [e.key for e in reports["T#a"].engines] == ["k"] and reports["T#a"].device_bytes == 7


def engine(key: str, replica: str, nbytes: int) -> EngineInfo:
    info = EngineInfo.unloaded(key, "tiny", [])
    return info.model_copy(
        update={"state": "loaded", "device": "cpu", "bytes": nbytes, "replica": replica}
    )


def test_models_lists_every_translators_engines(tiny_bundle):
    served = load_served_bundle(tiny_bundle)
    first, second, *rest = served.engine_keys
    reports = {
        "T#b": ReplicaReport("", [engine(first, "T#b", 7)], device_bytes=7),
        "T#a": ReplicaReport("", [engine(first, "T#a", 7), engine(second, "T#a", 9)], 16),
        "Ingress#x": ReplicaReport(""),
    }
    view = merge_engines([served], reports)
    assert [(e.key, e.replica, e.state) for e in view.engines] == [
        (first, "T#a", "loaded"),
        (first, "T#b", "loaded"),  # a key on two replicas is listed for each
        (second, "T#a", "loaded"),
    ] + [(k, None, "unloaded") for k in rest]
    assert view.device_bytes == 23
    for info in view.engines[3:]:  # held by none: the routes it would serve
        assert info.routes == [route_key(r) for r in served.routes_of_key(info.key)] != []
