"""The cluster application (server.cluster) on a real local Ray: Serve's HTTP proxy, the
ingress (the FastAPI app) and two translator replicas of half a CPU each, multiplexed by
engine key, on the tiny bundle. Ray starts once for the module (about half a minute on two
cores) and is shut down by the last test, which checks that no Ray process is left."""

from __future__ import annotations

import socket
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import ray
import yaml
from prometheus_client.parser import text_string_to_metric_families
from ray import serve
from ray.serve._private.common import DeploymentID
from ray.serve._private.long_poll import LongPollNamespace
from ray.serve.schema import ServeDeploySchema

from loadtests.bench_cluster_replace import engine_loads
from server.bundles import load_served_bundle
from server.cluster import build_app, largest_engine_bytes
from server.settings import Settings

pytestmark = pytest.mark.integration

APP = "lsmt"
SERVE_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "serve.yaml"
# As the single-process servers of these tests run the tiny model (conftest._factory).
SETTINGS = {
    "device": "cpu",
    "warmup_routes": [],
    "output_checks": False,
    "repetition_penalty": 1.0,
    "no_repeat_ngram_size": 0,
}
RAY_PROCESSES = {"raylet", "gcs_server", "plasma_store"}
# Short, so that a hot key gains a replica within the test (server.cluster_balance); the
# other tests send too few requests in any such window (20 needed) to move a key.
BALANCE_WINDOW_S = 3.0


class Cluster:
    def __init__(self, url: str) -> None:
        self.url = url
        self.stopped = False

    def post(self, body: dict[str, Any], timeout: float = 120) -> httpx.Response:
        return httpx.post(f"{self.url}/v1/translate", json=body, timeout=timeout)

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            serve.shutdown()
            ray.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def cluster(tiny_bundle):
    # Two engines per replica (as the translators measure them): the tiny bundle's three
    # keys need both replicas.
    served = load_served_bundle(tiny_bundle)
    budget = 2 * largest_engine_bytes(served, Settings(device="cpu")) + 1
    settings = {**SETTINGS, "bundles": [str(tiny_bundle)], "device_budget_bytes": budget}
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 2**20)
    port = _free_port()
    c = Cluster(f"http://127.0.0.1:{port}")
    try:
        # the host as deploy/serve.yaml (make serve-cluster) gives it, read as Serve reads it
        config = ServeDeploySchema.model_validate(yaml.safe_load(SERVE_CONFIG.read_text()))
        serve.start(http_options={"host": config.http_options.host, "port": port})
        app = build_app(
            {
                "settings": settings,
                "translators": 2,
                "translator_cpus": 0.5,
                "balance_window_s": BALANCE_WINDOW_S,
            }
        )
        serve.run(app, name=APP, route_prefix="/")
        yield c
    finally:
        c.stop()


def test_the_proxy_listens_on_loopback_only(cluster):
    """make serve-cluster's config binds 127.0.0.1: no socket listens on the proxy's port on
    another address (Serve's own default for a config file is every interface)."""
    port = int(cluster.url.rsplit(":", 1)[1])
    assert httpx.get(f"{cluster.url}/readyz", timeout=30).status_code in (200, 503)
    listening = {
        c.laddr.ip
        for c in psutil.net_connections(kind="tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    }
    assert listening == {"127.0.0.1"}


def body(text: str, target: str, source: str = "en") -> dict[str, Any]:
    return {"text": text, "source": source, "target": target, "beam_size": 2}


def replica_of(r: httpx.Response) -> str:
    assert r.status_code == 200, r.text
    return r.headers["x-lsmt-replica"]


def engine_key(target: str) -> str:
    """The tiny bundle's engine key (and Serve's multiplexed model id) into `target`."""
    return f"tiny:shared+tgt/{target}"


def wait_until_routers_know(replica: str, target: str, timeout: float = 30) -> None:
    """Wait until Serve's routers know that `replica` holds the key of `target`.

    A replica pushes the model ids it holds to the controller (every 0.1 s in Ray 2.60), which
    broadcasts them to every router by long poll; until then Serve may route the key anywhere
    (its multiplexing is best effort). This reads the controller's last broadcast, the very
    snapshot the ingress's router was sent, rather than sleeping for a guessed time."""
    controller = ray.get_actor("SERVE_CONTROLLER_ACTOR", namespace="serve")
    topic = (LongPollNamespace.DEPLOYMENT_TARGETS, DeploymentID(name="Translator", app_name=APP))
    key, unique_id = engine_key(target), replica.split("#", 1)[1]
    deadline = time.monotonic() + timeout
    while True:
        # snapshot id -1 is older than any: the controller answers at once with its current one
        targets = ray.get(controller.listen_for_change.remote({topic: -1}))[topic].object_snapshot
        held = {
            info.replica_id.unique_id: set(info.multiplexed_model_ids)
            for info in targets.running_replicas
        }
        if key in held.get(unique_id, set()):
            return
        assert time.monotonic() < deadline, (replica, key, held)
        time.sleep(0.05)


def test_ingress_serves_the_same_api(cluster):
    ready = httpx.get(f"{cluster.url}/readyz", timeout=30)
    assert ready.status_code in (200, 503) and ready.json()["bundles"] == {"tiny": "ok"}
    langs = httpx.get(f"{cluster.url}/v1/languages", timeout=30).json()
    assert {lang["code"] for lang in langs["languages"]} == {"de", "en", "fr"}
    # a client mistake is answered by the ingress itself, with the single server's error body
    bad = cluster.post(body("Hello.", "xx"))
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "unknown_language"
    # one request id per response, the client's, as in the body (Serve's proxy writes it)
    for r in (
        httpx.post(
            f"{cluster.url}/v1/translate", json=b, headers={"X-Request-ID": "abc-1"}, timeout=120
        )
        for b in (body("Hello.", "de"), body("Hello.", "xx"))
    ):
        assert r.headers.get_list("x-request-id") == ["abc-1"], r.headers
        assert r.json().get("request_id", "abc-1") == "abc-1"


def test_a_keys_requests_stay_on_the_replica_that_loaded_it(cluster):
    first = replica_of(cluster.post(body("In the beginning.", "de")))
    wait_until_routers_know(first, "de")
    replicas = {replica_of(cluster.post(body(f"In the beginning {i}.", "de"))) for i in range(5)}
    assert replicas == {first}


def test_different_keys_spread_over_replicas(cluster):
    seen: dict[str, str] = {}
    for target in ("de", "fr", "de", "fr"):
        replica = replica_of(cluster.post(body("And God said, Let there be light.", target)))
        assert seen.setdefault(target, replica) == replica  # each key keeps its replica
        wait_until_routers_know(replica, target)
    # de came first to an empty cluster; fr goes to the replica with the fewest keys
    assert seen["de"] != seen["fr"]


def test_metrics_are_one_view_over_every_replica(cluster):
    """One scrape of the ingress shows every replica's series, labelled by replica: the
    translators' engine loads and resident keys beside the ingress's HTTP requests."""
    held: dict[str, str] = {}
    for target in ("de", "fr"):
        held[target] = replica_of(cluster.post(body("Let there be light.", target)))
    deadline = time.monotonic() + 30  # the replicas report every few seconds
    while True:
        text = httpx.get(f"{cluster.url}/metrics", timeout=30).text
        families = list(text_string_to_metric_families(text))
        samples = [s for f in families for s in f.samples]
        resident = {
            (s.labels["replica"], s.labels["engine"])
            for s in samples
            if s.name == "lsmt_engine_resident" and s.labels["tier"] == "device" and s.value == 1
        }
        wanted = {(replica, engine_key(t)) for t, replica in held.items()}
        if wanted <= resident:
            break
        assert time.monotonic() < deadline, (wanted, resident)
        time.sleep(1)
    names = [f.name for f in families]
    assert len(names) == len(set(names))  # merged: one family per metric
    per_replica: dict[str, int] = {}
    for replica, _ in resident:
        per_replica[replica] = per_replica.get(replica, 0) + 1
    assert max(per_replica.values()) <= 2  # the budget: two engines a replica
    replicas = {s.labels.get("replica") for s in samples}
    assert set(held.values()) <= replicas and any(r.startswith("Ingress#") for r in replicas)
    loads = {
        s.labels["replica"] for s in samples if s.name == "lsmt_engine_loads_total" and s.value >= 1
    }
    assert set(held.values()) <= loads
    http = [s for s in samples if s.name == "lsmt_http_requests_total" and s.value > 0]
    assert http and all(s.labels["replica"].startswith("Ingress#") for s in http)


def test_models_lists_every_replicas_engines(cluster):
    """/v1/models on the ingress lists the engines of each translator replica, named, with the
    bytes they hold; and each translator's start-up line reached its Serve log."""
    held = {t: replica_of(cluster.post(body("Let there be light.", t))) for t in ("de", "fr")}
    deadline = time.monotonic() + 30  # the replicas report every few seconds
    while True:
        models = httpx.get(f"{cluster.url}/v1/models", timeout=30).json()
        loaded = {
            (e["key"], e["replica"]): e["bytes"]
            for e in models["engines"]
            if e["state"] == "loaded"
        }
        wanted = {(engine_key(t), replica) for t, replica in held.items()}
        if wanted <= set(loaded):
            break
        assert time.monotonic() < deadline, (wanted, loaded)
        time.sleep(1)
    assert all(nbytes > 0 for nbytes in loaded.values())
    assert models["used"]["device_bytes"] >= sum(loaded.values())
    keys = {e["key"] for e in models["engines"]}
    assert keys == set(models["bundles"][0]["engine_keys"])  # unheld keys listed unloaded
    logs = Path(ray._private.worker._global_node.get_logs_dir_path()) / "serve"
    lines = [
        line
        for log in logs.glob(f"replica_{APP}_Translator_*.log")
        for line in log.read_text(errors="replace").splitlines()
    ]
    assert sum("up to 2 engines" in line for line in lines) >= 2, lines[-20:]


def test_outputs_equal_the_single_process_server(cluster, make_server, tiny_bundle):
    single = make_server(**{k: v for k, v in SETTINGS.items() if k != "device"})
    alternatives = {**body("And the evening and the morning were the first day.", "fr")}
    alternatives["num_alternatives"] = 1
    requests = [
        body("In the beginning God created the heaven and the earth.", "de"),
        body("Im Anfang schuf Gott Himmel und Erde. Und die Erde war wüst.", "fr", "de"),
        alternatives,
        body("Et Dieu dit: Que la lumière soit!", "en", "auto"),
    ]
    for req in requests:
        got = cluster.post(req)
        want = httpx.post(f"{single.url}/v1/translate", json=req, timeout=60)
        assert got.status_code == want.status_code == 200, (got.text, want.text)
        strip = lambda b: {k: v for k, v in b.items() if k != "request_id"}  # noqa: E731
        assert strip(got.json()) == strip(want.json())


def test_a_replica_killed_in_flight(cluster):
    """Requests in flight on a replica that dies are answered (retried on another replica,
    or 503 with Retry-After); Serve replaces it and later requests succeed."""
    long_text = " ".join(f"And the evening and the morning were day {i}." for i in range(40))
    victim = replica_of(cluster.post(body("In the beginning.", "de")))
    loads_before = engine_loads(cluster.url)
    actor = ray.get_actor(f"SERVE_REPLICA::{APP}#{victim}", namespace="serve")
    with ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(cluster.post, body(long_text, "de"), 120) for _ in range(6)]
        time.sleep(0.3)
        ray.kill(actor, no_restart=True)
        answers = [f.result(timeout=150) for f in futures]  # none hangs
    print("KILL", [(r.status_code, r.headers.get("x-lsmt-replica")) for r in answers], victim)
    for r in answers:
        assert r.status_code in (200, 503), r.text
        if r.status_code == 503:
            assert int(r.headers["retry-after"]) > 0
            assert r.json()["error"]["code"] == "engine_unavailable"
    # A request the victim finished before the kill is rightly its answer (CI saw one finish
    # in 170 ms); the others were in flight when it died and were retried on the survivor.
    recovered = [r for r in answers if r.headers.get("x-lsmt-replica") != victim]
    assert recovered, "the kill caught no request in flight"
    # Serve starts a replacement; the cluster serves every key again.
    deadline = time.monotonic() + 120
    while True:
        status = serve.status().applications[APP].deployments["Translator"]
        running = status.replica_states.get("RUNNING", 0)
        if status.status == "HEALTHY" and running == 2:
            break
        assert time.monotonic() < deadline, status
        time.sleep(1)
    for target in ("de", "fr", "en"):
        source = "de" if target == "en" else "en"
        assert (
            cluster.post(
                body("Und Gott sprach." if source == "de" else "Hello.", target, source)
            ).status_code
            == 200
        )
    # the victim's engine loads stay counted in the cluster's sum
    assert engine_loads(cluster.url) >= loads_before


def test_a_replacement_replica_takes_a_share_of_the_keys_in_use(cluster):
    """After the kill (above) the keys in use are on the survivor: under traffic, a hot key
    gains a second model id, which Serve places on the replica with the fewest keys, and
    the key's requests are decoded on both replicas."""
    seen: Counter[str] = Counter()
    deadline = time.monotonic() + 120
    with ThreadPoolExecutor(4) as pool:
        while len(seen) < 2:
            assert time.monotonic() < deadline, seen
            texts = [f"And the evening and the morning were day {i}." for i in range(8)]
            for r in pool.map(lambda t: cluster.post(body(t, "de")), texts):
                seen[replica_of(r)] += 1
    print("SHARES", seen)


def test_shutdown_leaves_no_ray_process(cluster):
    cluster.stop()
    deadline = time.monotonic() + 30
    while True:
        left = [
            p.info["name"] for p in psutil.process_iter(["name"]) if p.info["name"] in RAY_PROCESSES
        ]
        if not left:
            break
        assert time.monotonic() < deadline, left
        time.sleep(0.5)
