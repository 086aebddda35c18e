"""One metrics view over the cluster's replicas (``server.cluster``).

Each replica, ingress or translator, keeps its own Prometheus registry (``server.metrics``) and
reports it to the ``MetricsHub`` deployment every ``REPORT_INTERVAL_S``. Any ingress answers
``/metrics`` with every replica's series merged into one exposition, each labelled with its
``replica``: one scrape of the Serve proxy sees the whole application, and the dashboard's
``sum by (...)`` queries read the same in both modes. A replica silent for ``STALE_AFTER_S``
(replaced or gone) leaves the view.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from ray import serve
from ray.serve.handle import DeploymentHandle

log = logging.getLogger("server.cluster")

REPORT_INTERVAL_S = 5.0
STALE_AFTER_S = 30.0


@serve.deployment(num_replicas=1, ray_actor_options={"num_cpus": 0})
class MetricsHub:
    """The latest exposition of every replica that reported recently."""

    def __init__(self) -> None:
        self.reports: dict[str, tuple[float, str]] = {}

    def report(self, replica: str, exposition: str) -> None:
        self.reports[replica] = (time.monotonic(), exposition)

    def collect(self) -> dict[str, str]:
        now = time.monotonic()
        self.reports = {r: v for r, v in self.reports.items() if now - v[0] <= STALE_AFTER_S}
        return {replica: text for replica, (_, text) in self.reports.items()}


async def report_forever(
    hub: DeploymentHandle[MetricsHub], replica: str, registry: CollectorRegistry
) -> None:
    """Send ``registry`` to the hub every ``REPORT_INTERVAL_S``, until cancelled."""
    while True:
        try:
            await hub.report.remote(replica, generate_latest(registry).decode())
        except Exception as exc:  # the hub restarting: the next report catches up
            log.warning("metrics report of %s failed: %s", replica, exc)
        await asyncio.sleep(REPORT_INTERVAL_S)


class _Merged:
    """A collector of already merged families (what ``generate_latest`` reads)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def merge_expositions(reports: dict[str, str]) -> bytes:
    """One exposition of every replica's series, each with a ``replica`` label."""
    families: dict[str, Metric] = {}
    for replica, text in sorted(reports.items()):
        for family in text_string_to_metric_families(text):
            merged = families.get(family.name)
            if merged is None:
                merged = Metric(family.name, family.documentation, family.type, family.unit)
                families[family.name] = merged
            merged.samples += [
                s._replace(labels={**s.labels, "replica": replica}) for s in family.samples
            ]
    return generate_latest(_Merged(list(families.values())))
