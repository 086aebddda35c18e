"""What the deployment's PromQL (the Grafana dashboard, the alert rules) may name: the series a
real server exports, and the metric and label names an expression uses."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Series Prometheus makes itself, and labels it adds to every scraped series; the cluster's
# merged /metrics adds the replica of every series (server.cluster_metrics).
PROMETHEUS_SERIES: dict[str, set[str]] = {"up": set()}
PROMETHEUS_LABELS = {"job", "instance", "replica"}


def exported_series() -> dict[str, set[str]]:
    """Sample name -> label names, from /metrics of the real app serving the default model,
    after one translation (so every histogram and labelled counter has a sample)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    from server.app import create_app
    from server.settings import Settings

    async def scrape() -> str:
        settings = Settings(bundles=[ROOT / "models" / "default"], device="cpu", warmup_routes=[])
        app = create_app(settings)
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url="http://lsmt") as client,
        ):
            body = {"text": "In the beginning.", "source": "en", "target": "es"}
            r = await client.post("/v1/translate", json=body, timeout=60)
            assert r.status_code == 200, r.text
            return (await client.get("/metrics")).text

    text = asyncio.run(scrape())
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


# PromQL words that look like metric names.
_KEYWORDS = {
    *("by", "without", "on", "ignoring", "group_left", "group_right"),
    *("bool", "and", "or", "unless", "offset"),
}


def promql_names(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, label names) used by a PromQL expression."""
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors
    labels: set[str] = set()
    for group in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
        labels |= {x.strip() for x in group.split(",") if x.strip()}
    for matchers in re.findall(r"\{([^}]*)\}", expr):
        labels |= set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)", matchers))
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", "", expr)
    names = {
        m.group(0)
        for m in re.finditer(r"(?<![\w.])[a-zA-Z_:][\w:]*", expr)
        if m.group(0).lower() not in _KEYWORDS and not expr[m.end() :].lstrip().startswith("(")
    }
    return names, labels


def check_names(where: str, expr: str, exported: dict[str, set[str]]) -> set[str]:
    """Assert that ``expr`` names only exported series and their labels; its metric names."""
    names, labels = promql_names(expr)
    assert names, f"{where}: no metric in {expr}"
    known = {**exported, **PROMETHEUS_SERIES}
    unknown = names - set(known)
    assert not unknown, f"{where}: {unknown} not exported by the server"
    have = set().union(*(known[n] for n in names)) | PROMETHEUS_LABELS
    assert labels <= have, f"{where}: labels {labels - have} not on {names}"
    return names
