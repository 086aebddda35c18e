"""A real Prometheus (Debian's build) scraping a real server on loopback, with the alert rules
of deploy/prometheus loaded: after some traffic every query of the Grafana dashboard returns
data, the rules evaluate without error, and a healthy server raises no alert. Skipped where
Prometheus is not installed (`make install-promtool`, part of `make test`)."""

from __future__ import annotations

import json
import math
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "deploy" / "grafana" / "dashboards"
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
SCRAPE_S = 1
# Grafana's $__rate_interval is at least four scrape intervals; a minute covers the traffic.
RATE_INTERVAL = "1m"
# Panels that must show numbers, not only series, once requests have been translated.
MUST_BE_FINITE = ("Requests/s", "p95 latency /v1/translate", "Tokens per second")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url
        self.http = httpx.Client(base_url=url, timeout=10)

    def query(self, expr: str) -> list[dict]:
        r = self.http.get("/api/v1/query", params={"query": expr})
        assert r.status_code == 200, f"{expr}: {r.text}"
        return r.json()["data"]["result"]

    def scrapes(self) -> int:
        """Samples of ``up`` so far (one per scrape)."""
        result = self.query('count_over_time(up{job="lsmt"}[10m])')
        return int(float(result[0]["value"][1])) if result else 0

    def wait_scrapes(self, n: int, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        start = self.scrapes()
        while self.scrapes() < start + n:
            assert time.monotonic() < deadline, f"Prometheus did not scrape {n} times"
            time.sleep(0.2)


@pytest.fixture
def prometheus(make_server, tmp_path) -> Iterator[tuple[Prometheus, object]]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus not installed (Debian's prometheus package: make install-promtool)")
    server = make_server()
    server.wait_ready()
    config = {
        "global": {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {
                "job_name": "lsmt",
                "metrics_path": "/metrics",
                "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}],
            }
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = _free_port()
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    prom = Prometheus(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-2000:]
            try:
                if prom.http.get("/-/ready").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "Prometheus did not get ready"
            time.sleep(0.2)
        yield prom, server
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def _panel_queries() -> list[tuple[str, str]]:
    out = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            out += [(panel["title"], t["expr"]) for t in panel.get("targets", [])]
    assert out
    return out


def test_every_dashboard_panel_and_alert_rule_works_on_a_real_prometheus(prometheus):
    prom, server = prometheus
    prom.wait_scrapes(1)
    # Traffic over a few scrapes, so that rates see it: translations on two routes, and a
    # client mistake.
    with server.client() as c:
        end = time.monotonic() + 3 * SCRAPE_S
        while time.monotonic() < end:
            for tgt in ("de", "fr"):
                r = c.post("/v1/translate", json={"text": "In the beginning.", "source": "en",
                                                  "target": tgt})  # fmt: skip
                assert r.status_code == 200, r.text
        r = c.post("/v1/translate", json={"text": "x", "source": "en", "target": "xx"})
        assert r.status_code == 400
    prom.wait_scrapes(3)

    for title, expr in _panel_queries():
        result = prom.query(expr.replace("$__rate_interval", RATE_INTERVAL))
        assert result, f"panel {title!r} shows no data: {expr}"
        if title in MUST_BE_FINITE:
            values = [float(s["value"][1]) for s in result]
            assert all(math.isfinite(v) and v > 0 for v in values), (title, values)

    assert float(prom.query("lsmt_ready")[0]["value"][1]) == 1.0
    budget = prom.query('lsmt_engine_budget_bytes{tier="device"}')
    assert float(budget[0]["value"][1]) == server.state.settings.resolved_device_budget

    groups = prom.http.get("/api/v1/rules").json()["data"]["groups"]
    rules = [r for g in groups for r in g["rules"]]
    expected = [r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert sorted(r["name"] for r in rules) == sorted(expected)
    for rule in rules:
        assert rule["health"] == "ok", (rule["name"], rule.get("lastError"))
    assert prom.query("ALERTS") == [], "a healthy server raised alerts"


def test_readiness_is_exported_live(make_server):
    """lsmt_ready follows the server's readiness at each scrape (0 while warming up)."""
    server = make_server(warmup_routes=["en-de"])
    body = server.wait_ready()
    assert body["warmup"]["done"]
    text = httpx.get(f"{server.url}/metrics").text
    assert "lsmt_ready 1.0" in text
    server.state.warmup_errors["en-de"] = "a failure, as a failed warm-up records it"
    text = httpx.get(f"{server.url}/metrics").text
    assert "lsmt_ready 0.0" in text
    assert httpx.get(f"{server.url}/readyz").status_code == 503
